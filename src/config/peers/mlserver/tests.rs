use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use crate::config::{Cli, Command, ConfigError, LogLevel, ServeArgs};

const CUSTOM_PORTS: &str = include_str!(
    "../../../../tests/migration/mlserver/seldonio/tests/testdata/settings-custom-md-repo.json"
);
const EXAMPLE_SETTINGS: &str =
    include_str!("../../../../tests/migration/mlserver/seldonio/docs/examples/mms/settings.json");

/// A folder for `mlserver start`, holding `settings` as its settings.json when given.
/// Removed when dropped.
struct Folder(PathBuf);

impl Folder {
    fn new(tag: &str, settings: Option<&str>) -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "tensorport-mlserver-start-{}-{tag}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)?;
        if let Some(settings) = settings {
            std::fs::write(dir.join("settings.json"), settings)?;
        }
        Ok(Self(dir))
    }

    fn start(&self, program: &[&str], env: &[(&str, &str)]) -> Result<ServeArgs, ConfigError> {
        let mut line: Vec<OsString> = program.iter().map(OsString::from).collect();
        line.push(OsString::from("start"));
        line.push(self.0.clone().into_os_string());
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        let Command::Serve(serve) = Cli::parse_with_mlserver_env(line, &env)?.command;
        Ok(serve)
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ports(args: &ServeArgs) -> (u16, u16, Option<u16>) {
    (
        args.network.rest_port,
        args.network.grpc_port,
        args.observability.metrics_port,
    )
}

#[test]
fn mlservers_defaults_apply_without_settings() -> Result<(), Box<dyn std::error::Error>> {
    let folder = Folder::new("defaults", None)?;
    for program in [
        &["tensorport", "mlserver"][..],
        &["/usr/local/bin/mlserver"],
    ] {
        let args = folder.start(program, &[])?;
        assert_eq!(ports(&args), (8080, 8081, Some(8082)), "{program:?}");
        assert_eq!(args.models.model_dir.as_deref(), Some(folder.0.as_path()));
        assert_eq!(
            args.models.model_poll_secs, 0,
            "MLServer does not poll its folder"
        );
        assert!(args.not_applied.is_empty(), "{:?}", args.not_applied);
    }
    Ok(())
}

#[test]
fn settings_json_sets_ports_host_and_debug_and_names_the_rest(
) -> Result<(), Box<dyn std::error::Error>> {
    let folder = Folder::new("custom", Some(CUSTOM_PORTS))?;
    let args = folder.start(&["mlserver"], &[])?;
    assert_eq!(ports(&args), (8087, 8088, Some(8089)));
    assert_eq!(args.network.host.to_string(), "127.0.0.1");
    assert_eq!(args.observability.log_level, LogLevel::Debug);
    let named: Vec<&str> = args.not_applied.iter().map(|n| n.flag.as_str()).collect();
    for setting in [
        "cors_settings",
        "model_repository_implementation",
        "model_repository_implementation_args",
    ] {
        assert!(
            named
                .iter()
                .any(|n| n.ends_with(&format!("settings.json: {setting}"))),
            "{setting}: {named:?}"
        );
    }
    let lazy = Folder::new("lazy", Some(r#"{"load_models_at_startup": false}"#))?;
    let args = lazy.start(&["mlserver"], &[])?;
    assert_eq!(args.models.startup_models(), Some(Vec::new()));
    let example = Folder::new("example", Some(EXAMPLE_SETTINGS))?;
    let args = example.start(&["mlserver"], &[])?;
    assert_eq!(
        args.observability.log_level,
        LogLevel::Debug,
        "\"debug\": \"true\""
    );
    Ok(())
}

#[test]
fn environment_variables_win_over_settings_json() -> Result<(), Box<dyn std::error::Error>> {
    let folder = Folder::new("env", Some(CUSTOM_PORTS))?;
    let env = [
        ("MLSERVER_HTTP_PORT", "0"),
        ("MLSERVER_GRPC_PORT", "9001"),
        ("MLSERVER_SERVER_NAME", "edge"),
        (
            "MLSERVER_MODEL_IMPLEMENTATION",
            "mlserver_sklearn.SKLearnModel",
        ),
    ];
    let args = folder.start(&["tensorport", "mlserver"], &env)?;
    assert_eq!(ports(&args), (0, 9001, Some(8089)));
    let named: Vec<&str> = args.not_applied.iter().map(|n| n.flag.as_str()).collect();
    assert!(named.contains(&"MLSERVER_SERVER_NAME=edge"), "{named:?}");
    assert!(
        named.contains(&"MLSERVER_MODEL_IMPLEMENTATION"),
        "{named:?}"
    );
    Ok(())
}

#[test]
fn bad_settings_are_refused_naming_the_file_or_variable() -> Result<(), Box<dyn std::error::Error>>
{
    let malformed = Folder::new("malformed", Some("{\n  \"http_port\": 80,\n  }\n"))?;
    let error = malformed
        .start(&["mlserver"], &[])
        .err()
        .map(|e| e.to_string());
    let error = error.unwrap_or_default();
    assert!(
        error.contains("settings.json") && error.contains("line 3"),
        "{error}"
    );

    let folder = Folder::new("bad-port", Some(r#"{"grpc_port": 70000}"#))?;
    let error = folder
        .start(&["mlserver"], &[])
        .err()
        .map(|e| e.to_string());
    assert!(error
        .unwrap_or_default()
        .contains("settings.json: grpc_port: must be a port"));
    let plain = Folder::new("bad-env", None)?;
    let error = plain
        .start(&["mlserver"], &[("MLSERVER_HTTP_PORT", "http")])
        .err()
        .map(|e| e.to_string());
    assert!(error
        .unwrap_or_default()
        .contains("MLSERVER_HTTP_PORT=http"));

    let line = ["tensorport", "mlserver", "build", "."]
        .map(OsString::from)
        .to_vec();
    let error = Cli::parse_with_mlserver_env(line, &BTreeMap::new()).err();
    let error = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        error.contains("only `mlserver start FOLDER` serves"),
        "{error}"
    );
    Ok(())
}
