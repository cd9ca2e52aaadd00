//! TF Serving's `--ssl_config_file` (an SSLConfig text proto, its PEM texts inline) mapped onto
//! tensorport's TLS: `server_cert` and `server_key` as `--tls-cert` and `--tls-key`,
//! `custom_ca` with `client_verify: true` as `--tls-client-ca`. TF Serving puts TLS on its
//! gRPC port only; here TLS covers both ports, which start-up says.

use std::path::Path;

use super::error::ConfigError;
use crate::proto::tensorflow::serving::SslConfig;
use crate::repository::{read_text_trusted, OPERATOR_FILE};
use crate::textproto;
use crate::transport::{Pem, TlsFiles};

const FLAG: &str = "ssl-config-file";

/// The TLS an SSLConfig file describes, and its fields that are not applied (with why).
#[derive(Debug)]
pub struct SslFile {
    pub tls: TlsFiles,
    pub not_applied: Vec<&'static str>,
}

/// Reads `file`; an unreadable, malformed or incomplete file is refused naming it.
pub fn read(file: &Path) -> Result<SslFile, ConfigError> {
    let refuse = |why: String| ConfigError::PeerFile {
        flag: FLAG,
        path: file.to_path_buf(),
        why,
    };
    // A regular file within a cap: a FIFO or a device named here stops nothing.
    let text = read_text_trusted(file, OPERATOR_FILE).map_err(|err| refuse(err.to_string()))?;
    let config: SslConfig = textproto::parse("tensorflow.serving.SSLConfig", &text)
        .map_err(|err| refuse(format!("not an SSLConfig text proto: {err}")))?;
    map(file, config).map_err(|why| refuse(why.to_owned()))
}

fn map(file: &Path, config: SslConfig) -> Result<SslFile, &'static str> {
    let inline = |field: &'static str, text: String| Pem::Inline {
        file: file.to_path_buf(),
        field,
        text,
    };
    if config.server_cert.trim().is_empty() || config.server_key.trim().is_empty() {
        return Err("server_cert and server_key must both hold PEM text");
    }
    let mut not_applied = Vec::new();
    let client_ca = match (config.client_verify, config.custom_ca.trim().is_empty()) {
        (true, true) => {
            return Err("client_verify needs custom_ca, the CA client certificates chain to")
        }
        (true, false) => Some(inline("custom_ca", config.custom_ca)),
        (false, true) => None,
        // TF Serving asks for no client certificate then, so the CA checks nothing.
        (false, false) => {
            not_applied.push("custom_ca (client_verify is false: no client certificate is asked for, as in TF Serving)");
            None
        }
    };
    Ok(SslFile {
        tls: TlsFiles {
            cert: inline("server_cert", config.server_cert),
            key: inline("server_key", config.server_key),
            client_ca,
        },
        not_applied,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(text: &str) -> Result<SslFile, String> {
        let config: SslConfig =
            textproto::parse("tensorflow.serving.SSLConfig", text).map_err(|e| e.to_string())?;
        map(Path::new("ssl.config"), config).map_err(str::to_owned)
    }

    #[test]
    fn each_field_lands_on_its_tls_setting() -> Result<(), String> {
        let file = mapped(
            "server_key: \"KEY\"\nserver_cert: \"CERT\"\ncustom_ca: \"CA\"\nclient_verify: true\n",
        )?;
        let text = |pem: &Pem| match pem {
            Pem::Inline { field, text, .. } => format!("{field}={text}"),
            Pem::File(path) => path.display().to_string(),
        };
        assert_eq!(text(&file.tls.cert), "server_cert=CERT");
        assert_eq!(text(&file.tls.key), "server_key=KEY");
        assert_eq!(
            file.tls.client_ca.as_ref().map(text),
            Some("custom_ca=CA".into())
        );
        assert!(file.not_applied.is_empty());
        // Never the key itself in a log line.
        assert!(!format!("{:?}", file.tls).contains("KEY"));
        Ok(())
    }

    #[test]
    fn a_ca_without_client_verify_is_named_not_applied() -> Result<(), String> {
        let file = mapped("server_key: \"K\" server_cert: \"C\" custom_ca: \"CA\"")?;
        assert_eq!(file.tls.client_ca, None);
        assert_eq!(file.not_applied.len(), 1);
        Ok(())
    }

    #[test]
    fn incomplete_or_unknown_fields_are_refused() {
        for (text, needle) in [
            ("server_cert: \"C\"", "server_key must both"),
            (
                "server_key: \"K\" server_cert: \"C\" client_verify: true",
                "needs custom_ca",
            ),
            (
                "server_key: \"K\" server_cert: \"C\" verify: true",
                "verify",
            ),
        ] {
            let err = mapped(text).err().unwrap_or_default();
            assert!(err.contains(needle), "{text}: {err}");
        }
        let err = read(Path::new("/nonexistent/ssl.config"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("--ssl-config-file: /nonexistent/ssl.config"),
            "{err}"
        );
    }
}
