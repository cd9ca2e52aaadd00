use super::*;

fn on(rate: u32) -> Sampling {
    Sampling {
        level: TraceLevel {
            timestamps: true,
            tensors: false,
        },
        rate,
        ..Sampling::default()
    }
}

fn text(values: &[&str]) -> SettingValue {
    Some(values.iter().map(|v| (*v).to_owned()).collect())
}

fn get<'a>(answer: &'a [(&'static str, Vec<String>)], name: &str) -> &'a [String] {
    &answer.iter().find(|(n, _)| *n == name).unwrap().1
}

#[test]
fn one_request_in_every_rate_is_traced() {
    let settings = TraceSettings::new(TraceMode::OpenTelemetry, on(4));
    let traced = (0..12).filter(|_| settings.sample("m")).count();
    assert_eq!(traced, 3);
}

#[test]
fn nothing_is_traced_without_a_level_and_count_limits_traces() {
    let settings = TraceSettings::new(TraceMode::OpenTelemetry, Sampling::default());
    assert!(!settings.may_trace());
    assert!(!(0..2000).any(|_| settings.sample("m")));
    settings
        .update(
            None,
            [
                ("trace_level".to_owned(), text(&["TIMESTAMPS"])),
                ("trace_rate".to_owned(), text(&["1"])),
                ("trace_count".to_owned(), text(&["2"])),
            ],
        )
        .unwrap();
    assert_eq!((0..10).filter(|_| settings.sample("m")).count(), 2);
    assert_eq!(get(&settings.settings(None), "trace_count"), ["0"]);
}

#[test]
fn a_model_overrides_some_fields_and_clearing_falls_back() {
    let settings = TraceSettings::new(TraceMode::OpenTelemetry, on(1000));
    let answer = settings
        .update(Some("m"), [("trace_rate".to_owned(), text(&["1"]))])
        .unwrap();
    assert_eq!(get(&answer, "trace_rate"), ["1"]);
    assert_eq!(get(&answer, "trace_level"), ["TIMESTAMPS"]);
    assert!((0..5).all(|_| settings.sample("m")));
    assert_eq!(get(&settings.settings(None), "trace_rate"), ["1000"]);
    let answer = settings
        .update(Some("m"), [("trace_rate".to_owned(), None)])
        .unwrap();
    assert_eq!(get(&answer, "trace_rate"), ["1000"]);
    // The server's settings cleared go back to the command line's.
    settings
        .update(None, [("trace_rate".to_owned(), text(&["7"]))])
        .unwrap();
    let answer = settings
        .update(None, [("trace_rate".to_owned(), None)])
        .unwrap();
    assert_eq!(get(&answer, "trace_rate"), ["1000"]);
}

#[test]
fn a_refused_change_applies_nothing_and_fixed_settings_stay() {
    let settings = TraceSettings::new(TraceMode::OpenTelemetry, on(10));
    let refused = settings.update(
        None,
        [
            ("trace_rate".to_owned(), text(&["1"])),
            ("trace_level".to_owned(), text(&["LOUD"])),
        ],
    );
    assert!(matches!(refused, Err(TraceSettingsError::Invalid { .. })));
    assert_eq!(get(&settings.settings(None), "trace_rate"), ["10"]);
    assert_eq!(
        settings.update(None, [("trace_mode".to_owned(), text(&["triton"]))]),
        Err(TraceSettingsError::ModeFixed {
            current: "opentelemetry"
        })
    );
    assert_eq!(
        settings.update(None, [("trace_file".to_owned(), text(&["/etc/passwd"]))]),
        Err(TraceSettingsError::FileFixed)
    );
    assert!(settings
        .update(None, [("trace_mode".to_owned(), text(&["opentelemetry"]))])
        .is_ok());
    let err = settings
        .update(None, [("trace_colour".to_owned(), text(&["x"]))])
        .unwrap_err();
    assert!(err.to_string().contains("trace_colour"));
}
