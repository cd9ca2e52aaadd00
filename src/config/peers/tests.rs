use std::ffi::OsString;

use super::*;
use crate::api::health::Readiness;
use crate::config::{Cli, Command, LogLevel, ServeArgs};

/// `line` (its first word the program), with `{dir}` standing for a folder that exists.
fn words(line: &[&str], dir: &str) -> Vec<OsString> {
    line.iter()
        .map(|word| OsString::from(word.replace("{dir}", dir)))
        .collect()
}

fn dir() -> String {
    std::env::temp_dir().to_string_lossy().into_owned()
}

fn serve(line: &[&str]) -> Result<ServeArgs, ConfigError> {
    let Command::Serve(serve) = Cli::parse_from_args(words(line, &dir()))?.command;
    Ok(serve)
}

/// A value `flag` takes, on a command line that names the models another way.
fn sample(peer: Peer, flag: &PeerFlag) -> (&'static str, Vec<String>) {
    let value = match (flag.name, flag.kind) {
        ("model-control-mode", _) => "poll",
        ("http-address" | "grpc-address" | "metrics-address", _) => "127.0.0.1",
        ("model-repository" | "model-store" | "model_base_path", _) => "{dir}",
        ("log-verbose", _) => "1",
        ("cache-config", _) => "local,size=1048576",
        ("trace-config", _) => "mode=opentelemetry",
        ("trace-level", _) => "TIMESTAMPS",
        (_, Kind::Bool) => "true",
        (_, Kind::Int) => "1",
        (_, Kind::Float) => "1.5",
        (_, Kind::Str) => "m",
        (_, Kind::None) => "",
    };
    let program = match peer {
        Peer::Triton => TRITON_PROGRAM,
        Peer::TfServing => TF_SERVING_PROGRAM,
    };
    let given = match value {
        "" => format!("--{}", flag.name),
        value => format!("--{}={value}", flag.name),
    };
    let models = match (peer, flag.name) {
        (_, "model-repository" | "model-store" | "model_base_path" | "model_config_file") => None,
        (Peer::Triton, _) => Some("--model-repository={dir}"),
        (Peer::TfServing, _) => Some("--model_base_path={dir}"),
    };
    let line = models.into_iter().map(str::to_owned).chain([given]);
    (program, line.collect())
}

#[test]
fn every_flag_of_both_lists_starts_the_server_or_is_refused_naming_why() -> Result<(), ConfigError>
{
    for peer in [Peer::Triton, Peer::TfServing] {
        let code = translated_in_code(peer);
        for flag in peer_flags(peer)?.iter().filter(|flag| flag.name != "help") {
            let (program, line) = sample(peer, flag);
            let mut all = vec![program];
            all.extend(line.iter().map(String::as_str));
            let parsed = serve(&all);
            match flag.action {
                Action::Ours(ours) => {
                    let args = parsed?;
                    let given = args.not_applied.iter().any(|n| n.flag.contains(flag.name));
                    assert!(!given, "{all:?}: applied, yet warned about");
                    let command = <Cli as clap::CommandFactory>::command();
                    let serve = command.find_subcommand("serve");
                    let mut flags = serve.iter().flat_map(|s| s.get_arguments());
                    let known = flags.any(|arg| arg.get_long() == Some(ours));
                    assert!(known, "{}: --{ours} is not a serve flag", flag.name);
                }
                Action::Code => {
                    assert!(
                        code.contains(&flag.name),
                        "{}: no code applies it",
                        flag.name
                    );
                    if flag.name != "version" {
                        parsed?;
                    }
                }
                Action::Warn(instead) => {
                    let args = parsed?;
                    let warning = args.not_applied_warning().unwrap_or_default();
                    let named = format!("--{} ({instead})", flag.name);
                    assert!(warning.contains(&named), "{all:?}: {warning}");
                }
                Action::Unsafe(why) => {
                    let message = parsed.err().map(|e| e.to_string()).unwrap_or_default();
                    assert!(message.contains(flag.name), "{all:?}: {message}");
                    assert!(message.contains(why), "{all:?}: {message}");
                    let off = if flag.kind == Kind::Bool { "false" } else { "" };
                    let off = format!("--{}={off}", flag.name);
                    let mut line = all.clone();
                    line.pop();
                    line.push(&off);
                    serve(&line)?;
                }
            }
        }
        for name in code {
            let row = peer_flags(peer)?.into_iter().find(|f| f.name == *name);
            assert_eq!(
                row.map(|r| r.action),
                Some(Action::Code),
                "{peer:?}: {name}"
            );
        }
    }
    Ok(())
}

#[test]
fn the_known_refused_flags_now_start() -> Result<(), ConfigError> {
    let triton = [
        "tritonserver",
        "--model-repository={dir}",
        "--strict-model-config=false",
        "--model-control-mode=explicit",
        "--load-model=a",
        "--load-model",
        "b",
        "--log-verbose=1",
        "--log-info=true",
        "--log-warning",
        "true",
        "--log-error=1",
        "--http-address=127.0.0.1",
        "--grpc-address",
        "127.0.0.1",
        "--backend-config=onnxruntime,default-max-batch-size=4",
        "--backend-config=python,shm-default-byte-size=1024",
        "--strict-readiness=false",
        "--allow-http=true",
        "--allow-grpc=1",
        "--allow-metrics=on",
        "--exit-on-error=false",
        "--metrics-interval-ms=500",
        "--model-load-thread-count=2",
    ];
    let args = serve(&triton)?;
    assert_eq!(args.network.host.to_string(), "127.0.0.1");
    assert_eq!(
        args.models.startup_models(),
        Some(vec!["a".into(), "b".into()])
    );
    assert_eq!(args.models.model_poll_secs, 0);
    assert_eq!(args.observability.log_level, LogLevel::Debug);
    assert_eq!(args.observability.readiness, Readiness::Any);
    assert!(!args.models.strict_model_config);
    let warning = args.not_applied_warning().unwrap_or_default();
    for flag in [
        "--backend-config",
        "--metrics-interval-ms",
        "--model-load-thread-count",
    ] {
        assert!(warning.contains(flag), "{flag}: {warning}");
    }
    assert!(!warning.contains("--exit-on-error"), "{warning}");
    assert!(!warning.contains("--strict-model-config"), "{warning}");
    let strict = serve(&[
        "tritonserver",
        "--model-repository={dir}",
        "--disable-auto-complete-config",
    ])?;
    assert!(strict.models.strict_model_config);

    let tf_serving = [
        "tensorflow_model_server",
        "--model_base_path={dir}",
        "--monitoring_config_file=/config/monitoring.config",
        "--tensorflow_intra_op_parallelism=4",
        "--tensorflow_inter_op_parallelism=2",
        "--rest_api_num_threads=8",
        "--rest_api_timeout_in_ms=5000",
        "--enable_model_warmup",
        "--platform_config_file=/config/platform.config",
        "--grpc_channel_arguments=grpc.max_connection_age_ms=2000",
        "--num_load_threads=4",
        "--ssl_config_file=",
        "--max_num_load_retries=0",
        "--noenable_batching",
    ];
    let args = serve(&tf_serving)?;
    assert_eq!(args.models.intra_op_threads, 4);
    assert_eq!(args.models.inter_op_threads, 2);
    assert_eq!(args.overload.request_timeout_ms, 5000);
    assert!(!args.compatibility.enable_batching);
    assert_eq!(
        args.compatibility.monitoring_config_file.as_deref(),
        Some(std::path::Path::new("/config/monitoring.config"))
    );
    assert_eq!(
        args.compatibility.platform_config_file.as_deref(),
        Some(std::path::Path::new("/config/platform.config"))
    );
    // An empty file name is no file, as in TF Serving.
    assert_eq!(args.security.ssl_config_file, None);
    let warning = args.not_applied_warning().unwrap_or_default();
    assert!(!warning.contains("--monitoring_config_file"), "{warning}");
    let with_ssl = [
        "tensorflow_model_server",
        "--model_base_path={dir}",
        "--ssl_config_file=/config/ssl.config",
    ];
    assert_eq!(
        serve(&with_ssl)?.security.ssl_config_file.as_deref(),
        Some(std::path::Path::new("/config/ssl.config"))
    );
    for flag in [
        "--rest_api_num_threads",
        "--enable_model_warmup",
        "--grpc_channel_arguments",
        "--num_load_threads",
        "--max_num_load_retries",
    ] {
        assert!(warning.contains(flag), "{flag}: {warning}");
    }
    Ok(())
}

/// A peer command line and what it must come to: the ports, whether REST and gRPC are
/// off, the metrics port, the readiness rule and the poll period.
type Resolved = (
    &'static [&'static str],
    (u16, u16, bool, bool, Option<u16>, Readiness, u64),
);

const RESOLVED: &[Resolved] = &[
    (
        &["tritonserver", "--model-repository={dir}"],
        (8000, 8001, false, false, Some(8002), Readiness::All, 0),
    ),
    (
        &[
            "/opt/tritonserver/bin/tritonserver",
            "--model-repository",
            "{dir}",
        ],
        (8000, 8001, false, false, Some(8002), Readiness::All, 0),
    ),
    (
        &[
            "tensorport",
            "tritonserver",
            "--model-store={dir}",
            "--model-control-mode=poll",
        ],
        (8000, 8001, false, false, Some(8002), Readiness::All, 15),
    ),
    (
        &[
            "tritonserver",
            "--model-repository={dir}",
            "--model-control-mode=POLL",
            "--repository-poll-secs=5",
            "--http-port=9000",
            "--grpc-port=9001",
            "--allow-metrics=false",
            "--metrics-port=9002",
            "--strict-readiness=false",
        ],
        (9000, 9001, false, false, None, Readiness::Any, 5),
    ),
    (
        &[
            "tritonserver",
            "--model-repository={dir}",
            "--allow-http=false",
        ],
        (8501, 8001, true, false, Some(8002), Readiness::All, 0),
    ),
    (
        &[
            "tensorflow_model_server",
            "--model_base_path={dir}",
            "--model_name=m",
        ],
        (8501, 8500, true, false, None, Readiness::Any, 1),
    ),
    (
        &[
            "tensorport",
            "tensorflow_model_server",
            "--port=9500",
            "--rest_api_port=9501",
            "--model_base_path={dir}",
            "--file_system_poll_wait_seconds=0",
        ],
        (9501, 9500, false, false, None, Readiness::Any, 0),
    ),
    (
        &[
            "/usr/bin/tensorflow_model_server",
            "--port=0",
            "--rest_api_port=8501",
            "--model_base_path={dir}",
        ],
        (8501, 8500, false, true, None, Readiness::Any, 1),
    ),
];

#[test]
fn each_peer_command_line_gets_that_servers_defaults() -> Result<(), ConfigError> {
    for (line, expected) in RESOLVED {
        let args = serve(line)?;
        let (n, o) = (&args.network, &args.observability);
        let resolved = (
            n.rest_port,
            n.grpc_port,
            n.disable_rest,
            n.disable_grpc,
            o.metrics_port,
            o.readiness,
            args.models.model_poll_secs,
        );
        assert_eq!(&resolved, expected, "{line:?}");
        assert_eq!(args.models.startup_models(), None, "{line:?}");
    }
    Ok(())
}

#[test]
fn tritons_cache_flags_size_the_response_cache() -> Result<(), ConfigError> {
    let lines: &[(&[&str], Option<u64>)] = &[
        (&["--cache-config", "local,size=1048576"], Some(1 << 20)),
        (&["--cache-config=local,size=4096"], Some(4096)),
        (&["--response-cache-byte-size=2048"], Some(2048)),
        (&["--response-cache-byte-size=0"], None),
        (&[], None),
    ];
    for (flags, expected) in lines {
        let mut line = vec!["tritonserver", "--model-repository={dir}"];
        line.extend(flags.iter());
        let size = serve(&line)?.models.response_cache_bytes();
        assert_eq!(size, *expected, "{line:?}");
    }
    let redis = serve(&[
        "tritonserver",
        "--model-repository={dir}",
        "--cache-config=redis,host=localhost",
    ]);
    let refused = redis.err().map(|err| err.to_string()).unwrap_or_default();
    assert!(refused.contains("redis"), "{refused}");
    Ok(())
}

#[test]
fn explicit_mode_loads_only_the_named_models_at_start() -> Result<(), ConfigError> {
    let lines: &[(&[&str], Option<&[&str]>)] = &[
        (&["--model-control-mode=explicit"], Some(&[])),
        (
            &["--model-control-mode", "explicit", "--load-model", "a"],
            Some(&["a"]),
        ),
        (&["--model-control-mode=explicit", "--load-model=*"], None),
        (&["--load-model=a"], None),
    ];
    for (flags, expected) in lines {
        let mut line = vec!["tritonserver", "--model-repository={dir}"];
        line.extend(flags.iter());
        let models = serve(&line)?.models.startup_models();
        let expected = expected.map(|names| names.iter().map(|n| n.to_string()).collect());
        assert_eq!(models, expected, "{line:?}");
    }
    Ok(())
}

#[test]
fn only_tritons_explicit_mode_lets_clients_load_and_unload() -> Result<(), ConfigError> {
    let lines: &[(&[&str], bool)] = &[
        (&[], false),
        (&["--model-control-mode=none"], false),
        (&["--model-control-mode=poll"], false),
        (
            &["--model-control-mode=POLL", "--repository-poll-secs=5"],
            false,
        ),
        (&["--model-control-mode=explicit"], true),
        (
            &["--model-control-mode", "EXPLICIT", "--load-model=a"],
            true,
        ),
    ];
    for (flags, open) in lines {
        let mut line = vec!["tritonserver", "--model-repository={dir}"];
        line.extend(flags.iter());
        assert_eq!(serve(&line)?.models.model_control_api, *open, "{line:?}");
    }
    // TF Serving's reload-config is open, as it is there; and so is `serve`'s default.
    let tf_serving = serve(&["tensorflow_model_server", "--model_base_path={dir}"])?;
    assert!(tf_serving.models.model_control_api);
    let ours = serve(&["tensorport", "serve", "--model-dir={dir}"])?;
    assert!(ours.models.model_control_api);
    let closed = serve(&[
        "tensorport",
        "serve",
        "--model-dir={dir}",
        "--model-control-api=false",
    ])?;
    assert!(!closed.models.model_control_api);
    Ok(())
}

#[test]
fn values_that_cannot_be_honoured_are_refused_saying_why() {
    let refused: &[(&[&str], &str)] = &[
        (
            &[
                "tritonserver",
                "--model-repository={dir}",
                "--model-repository=/elsewhere",
            ],
            "one model repository",
        ),
        (
            &[
                "tritonserver",
                "--model-repository={dir}",
                "--model-control-mode=auto",
            ],
            "none, poll or explicit",
        ),
        (
            &[
                "tritonserver",
                "--model-repository={dir}",
                "--model-control-mode=explicit",
                "--load-model=*",
                "--load-model=a",
            ],
            "must be the only --load-model",
        ),
        (
            &[
                "tritonserver",
                "--model-repository={dir}",
                "--http-address=127.0.0.1",
                "--grpc-address=0.0.0.0",
            ],
            "one address",
        ),
        (
            &[
                "tritonserver",
                "--model-repository={dir}",
                "--grpc-use-ssl=true",
            ],
            "--grpc-use-ssl",
        ),
        (
            &[
                "tritonserver",
                "--model-repository={dir}",
                "--allow-http=maybe",
            ],
            "--allow-http",
        ),
        (
            &[
                "tritonserver",
                "--model-repository={dir}",
                "--log-verbose=loud",
            ],
            "--log-verbose",
        ),
        (
            &[
                "tensorflow_model_server",
                "--model_base_path={dir}",
                "--port=http",
            ],
            "--port",
        ),
        (
            &[
                "tensorflow_model_server",
                "--model_base_path={dir}",
                "--unknown_flag=1",
            ],
            "--unknown_flag",
        ),
    ];
    for (line, word) in refused {
        let message = serve(line).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains(word), "{line:?}: {message}");
    }
}

#[test]
fn each_peers_boolean_syntax_parses() -> Result<(), ConfigError> {
    let tf: &[(&str, bool)] = &[
        ("--enable_batching", true),
        ("--enable_batching=true", true),
        ("--enable_batching=1", true),
        ("--enable_batching=false", false),
        ("--enable_batching=0", false),
        ("--noenable_batching", false),
    ];
    for (flag, expected) in tf {
        let line = ["tensorflow_model_server", "--model_base_path={dir}", flag];
        assert_eq!(
            serve(&line)?.compatibility.enable_batching,
            *expected,
            "{flag}"
        );
    }
    let triton: &[(&[&str], Readiness)] = &[
        (&["--strict-readiness=true"], Readiness::All),
        (&["--strict-readiness", "false"], Readiness::Any),
        (&["--strict-readiness=0"], Readiness::Any),
        (&["--strict-readiness=ON"], Readiness::All),
        (&["--strict-readiness", "off"], Readiness::Any),
    ];
    for (flags, expected) in triton {
        let mut line = vec!["tritonserver", "--model-repository={dir}"];
        line.extend(flags.iter());
        assert_eq!(
            serve(&line)?.observability.readiness,
            *expected,
            "{flags:?}"
        );
    }
    Ok(())
}

type Found = Option<(Peer, usize)>;

#[test]
fn the_program_name_or_the_subcommand_picks_the_peer() {
    // A command line, and whose it is with how many arguments after the program.
    let lines: &[(&[&str], Found)] = &[
        (
            &["tritonserver", "--model-repository=/m"],
            Some((Peer::Triton, 1)),
        ),
        (
            &["/opt/tritonserver/bin/tritonserver"],
            Some((Peer::Triton, 0)),
        ),
        (
            &["tensorport", "tritonserver", "--x"],
            Some((Peer::Triton, 1)),
        ),
        (
            &["/usr/bin/tensorflow_model_server", "--port=1"],
            Some((Peer::TfServing, 1)),
        ),
        (
            &["tensorport", "tensorflow_model_server"],
            Some((Peer::TfServing, 0)),
        ),
        (&["tensorport", "serve", "tritonserver"], None),
        (&["tensorport", "--model-dir=/m"], None),
        (&["tensorport"], None),
    ];
    for (line, expected) in lines {
        let found = peer_command_line(&words(line, ""));
        let found = found.map(|line| (line.peer, line.args.len()));
        assert_eq!(&found, expected, "{line:?}");
    }
}

#[test]
fn tf_servings_version_flag_shows_the_version() {
    let shown = serve(&["tensorflow_model_server", "--version"]);
    let kind = match shown {
        Err(ConfigError::Clap(err)) => Some(err.kind()),
        _ => None,
    };
    assert_eq!(kind, Some(clap::error::ErrorKind::DisplayVersion));
}

/// TF Serving's Docker image passes `--model_name` and `--model_base_path` on every line; a
/// user who adds a model list keeps them, and TF Serving serves the list.
/// Line: tensorflow/serving tensorflow_serving/tools/docker/Dockerfile's entrypoint plus the
/// `--model_config_file` its g3doc/serving_config.md adds.
#[test]
fn a_model_list_wins_over_the_docker_images_single_model_flags() -> Result<(), ConfigError> {
    let args = serve(&[
        "tensorflow_model_server",
        "--port=8500",
        "--rest_api_port=8501",
        "--model_name=model",
        "--model_base_path=/models/model",
        "--model_config_file={dir}/models.config",
    ])?;
    assert_eq!(args.compatibility.model_name, None);
    assert_eq!(args.compatibility.model_base_path, None);
    assert!(args.compatibility.model_config_file.is_some());
    let warning = args.not_applied_warning().unwrap_or_default();
    assert!(
        warning.contains("--model_name") && warning.contains("--model_base_path"),
        "{warning}"
    );
    Ok(())
}

#[test]
fn tritons_trace_flags_come_to_one_trace_config() -> Result<(), ConfigError> {
    let repository = format!(
        "--model-repository={}/examples/models",
        env!("CARGO_MANIFEST_DIR")
    );
    let args = serve(&[
        TRITON_PROGRAM,
        &repository,
        "--trace-rate=50",
        "--trace-config",
        "mode=opentelemetry",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config",
        "opentelemetry,url=collector:4318/v1/traces",
    ])?;
    let trace = args.trace_config()?;
    assert!(trace.exports());
    assert_eq!(trace.sampling.rate, 50);
    assert!(trace.sampling.level.timestamps);
    assert_eq!(trace.export.url, "http://collector:4318/v1/traces");
    Ok(())
}
