//! The flags accepted under TF Serving's and Triton's spellings, so that command lines and
//! deployment files written for those servers start this one unchanged. One table; each flag
//! takes its aliases from it (`aliases = spellings_of("grpc_port")`). `--help` lists none of
//! them: each flag's own help says which it answers to.

/// Whose spelling an alias is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    TfServing,
    Triton,
}

/// A peer's spelling of one of our flags.
#[derive(Debug, Clone, Copy)]
pub struct PeerSpelling {
    pub peer: Peer,
    /// As the peer writes it, without the leading `--`.
    pub spelling: &'static str,
    /// Our flag's argument id (its field name, as `grpc_port`).
    pub flag: &'static str,
}

const fn spelling(peer: Peer, spelling: &'static str, flag: &'static str) -> PeerSpelling {
    PeerSpelling {
        peer,
        spelling,
        flag,
    }
}

/// Every alias, TF Serving's first.
pub const PEER_SPELLINGS: &[PeerSpelling] = &[
    spelling(Peer::TfServing, "port", "grpc_port"),
    spelling(Peer::TfServing, "rest_api_port", "rest_port"),
    spelling(
        Peer::TfServing,
        "file_system_poll_wait_seconds",
        "model_poll_secs",
    ),
    spelling(Peer::TfServing, "model_config_file", "model_config_file"),
    spelling(
        Peer::TfServing,
        "model_config_file_poll_wait_seconds",
        "model_config_file_poll_secs",
    ),
    spelling(Peer::TfServing, "model_name", "model_name"),
    spelling(Peer::TfServing, "model_base_path", "model_base_path"),
    spelling(Peer::TfServing, "enable_batching", "enable_batching"),
    spelling(
        Peer::TfServing,
        "batching_parameters_file",
        "batching_parameters_file",
    ),
    spelling(
        Peer::TfServing,
        "monitoring_config_file",
        "monitoring_config_file",
    ),
    spelling(Peer::TfServing, "ssl_config_file", "ssl_config_file"),
    spelling(
        Peer::TfServing,
        "platform_config_file",
        "platform_config_file",
    ),
    spelling(Peer::Triton, "model-repository", "model_dir"),
    spelling(Peer::Triton, "model_repository", "model_dir"),
    spelling(Peer::Triton, "http-port", "rest_port"),
    spelling(Peer::Triton, "repository-poll-secs", "model_poll_secs"),
];

/// The peers' spellings of `flag` (an argument id), for its `aliases = ...`.
pub fn spellings_of(flag: &'static str) -> impl Iterator<Item = &'static str> {
    PEER_SPELLINGS
        .iter()
        .filter(move |alias| alias.flag == flag)
        .map(|alias| alias.spelling)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::config::Cli;

    #[test]
    fn every_spelling_is_an_alias_of_its_flag_and_only_there() {
        let command = Cli::command();
        let serve = command.find_subcommand("serve");
        let args: Vec<&clap::Arg> = serve.iter().flat_map(|s| s.get_arguments()).collect();
        for alias in PEER_SPELLINGS {
            let owners: Vec<&str> = args
                .iter()
                .filter(|arg| {
                    arg.get_all_aliases()
                        .into_iter()
                        .flatten()
                        .any(|a| a == alias.spelling)
                })
                .map(|arg| arg.get_id().as_str())
                .collect();
            assert_eq!(owners, [alias.flag], "{alias:?}");
        }
        let total: usize = args
            .iter()
            .map(|arg| arg.get_all_aliases().map_or(0, |a| a.len()))
            .sum();
        assert_eq!(total, PEER_SPELLINGS.len(), "an alias outside the table");
    }
}
