//! Platform config files from public repositories (tests/migration/tfserving-platform), and
//! the fields tensorport maps.

use super::*;

const WARMUP_EXAMPLE: &str =
    include_str!("../../../tests/migration/tfserving-platform/warmup-example.platform.config");
const ALLOW_GROWTH: &str =
    include_str!("../../../tests/migration/tfserving-platform/allow-growth.platform.config");
const HASHMAP: &str =
    include_str!("../../../tests/migration/tfserving-platform/hashmap.platform.config");

#[test]
fn real_files_read_and_name_what_a_cpu_server_does_not_apply() -> Result<(), String> {
    let settings = from_text(WARMUP_EXAMPLE)?;
    assert_eq!(settings.intra_op_threads, None);
    assert_eq!(settings.batching, None);
    assert_eq!(
        settings.not_applied,
        vec![
            "session_config.gpu_options.per_process_gpu_memory_fraction",
            "session_config.gpu_options.allow_growth",
            "enable_model_warmup",
        ]
    );
    let settings = from_text(ALLOW_GROWTH)?;
    assert_eq!(
        settings.not_applied,
        vec!["session_config.gpu_options.allow_growth"]
    );
    Ok(())
}

#[test]
fn threads_and_batching_are_applied() -> Result<(), String> {
    let settings = from_text(
        r#"platform_configs {
          key: "tensorflow"
          value {
            source_adapter_config {
              [type.googleapis.com/tensorflow.serving.SessionBundleSourceAdapterConfig] {
                config {
                  session_config {
                    intra_op_parallelism_threads: 4
                    inter_op_parallelism_threads: 2
                    allow_soft_placement: true
                  }
                  batching_parameters {
                    max_batch_size { value: 16 }
                    num_batch_threads { value: 2 }
                  }
                }
              }
            }
          }
        }"#,
    )?;
    assert_eq!(settings.intra_op_threads, Some(4));
    assert_eq!(settings.inter_op_threads, Some(2));
    let batching = settings.batching.unwrap_or_default();
    assert_eq!(batching.max_batch_size, Some(16));
    assert_eq!(batching.num_batch_threads, Some(2));
    assert_eq!(
        settings.not_applied,
        vec!["session_config.allow_soft_placement"]
    );
    Ok(())
}

#[test]
fn a_custom_adapter_or_an_unknown_field_is_refused_naming_it() {
    let err = from_text(HASHMAP).err().unwrap_or_default();
    assert!(err.contains("HashmapSourceAdapterConfig"), "{err}");
    let err = from_text(&ALLOW_GROWTH.replace("allow_growth", "allow_grwth"))
        .err()
        .unwrap_or_default();
    assert!(err.contains("allow_grwth"), "{err}");
    let err = read(Path::new("/nonexistent/platform.config"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("--platform-config-file: /nonexistent/platform.config"),
        "{err}"
    );
}
