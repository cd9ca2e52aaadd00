//! The attacks a model folder's writer can make on the files the server reads from it.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use super::*;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A fresh folder holding `model/` (the folder read from) and `outside/secret` beside it.
struct Fixture {
    base: PathBuf,
}

impl Fixture {
    fn new(test: &str) -> std::io::Result<Self> {
        let base = std::env::temp_dir().join(format!(
            "tensorport-repo-file-{test}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("model").join("sub"))?;
        std::fs::create_dir_all(base.join("outside"))?;
        std::fs::write(base.join("outside").join("secret"), "root:secret\n")?;
        Ok(Self { base })
    }

    fn model(&self) -> PathBuf {
        self.base.join("model")
    }

    fn outside(&self) -> PathBuf {
        self.base.join("outside")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

const SMALL: Limit = Limit {
    cap: 16,
    what: "a test file",
};

fn make_fifo(path: &Path) -> rustix::io::Result<()> {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
}

/// Runs `read` on a thread of its own; a read that blocks (as opening a FIFO without
/// `O_NONBLOCK` does, for as long as no writer comes) fails the test instead of hanging it.
fn unblocked<T: Send + 'static>(read: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(read()));
    rx.recv_timeout(Duration::from_secs(60)).ok()
}

#[test]
fn a_regular_file_inside_is_read_whole() -> TestResult {
    let fixture = Fixture::new("regular")?;
    std::fs::write(fixture.model().join("labels.txt"), "a\nb\n")?;
    std::fs::write(fixture.model().join("sub").join("real.txt"), "c\n")?;
    symlink("sub/real.txt", fixture.model().join("linked.txt"))?;
    let read = |name: &str| read_text_inside(&fixture.model(), Path::new(name), SMALL);
    assert_eq!(read("labels.txt")?, "a\nb\n");
    // A link that stays inside the folder is followed.
    assert_eq!(read("linked.txt")?, "c\n");
    assert_eq!(read("sub/real.txt")?, "c\n");
    Ok(())
}

#[test]
fn a_file_of_exactly_the_cap_is_read_and_one_byte_more_is_refused() -> TestResult {
    let fixture = Fixture::new("cap")?;
    std::fs::write(fixture.model().join("at"), [b'x'; 16])?;
    std::fs::write(fixture.model().join("over"), [b'x'; 17])?;
    assert_eq!(
        read_inside(&fixture.model(), Path::new("at"), SMALL)?.len(),
        16
    );
    let refused = read_inside(&fixture.model(), Path::new("over"), SMALL);
    assert!(
        matches!(
            refused,
            Err(RepoFileError::TooLarge {
                cap: 16,
                what: "a test file",
                ..
            })
        ),
        "{refused:?}"
    );
    let message = refused.err().map(|err| err.to_string()).unwrap_or_default();
    assert!(message.contains("more than 16 bytes"), "{message}");
    Ok(())
}

/// The 1.5 GiB sparse config.pbtxt: refused after the cap, not held whole.
#[test]
fn a_huge_sparse_file_is_refused_at_the_cap() -> TestResult {
    let fixture = Fixture::new("sparse")?;
    let file = std::fs::File::create(fixture.model().join("config.pbtxt"))?;
    file.set_len(3 << 29)?;
    drop(file);
    let refused = read_inside(&fixture.model(), Path::new("config.pbtxt"), SETTINGS);
    assert!(
        matches!(refused, Err(RepoFileError::TooLarge { cap, .. }) if cap == SETTINGS.cap),
        "{refused:?}"
    );
    Ok(())
}

/// A regular file whose reported size says nothing of what it holds (procfs reports 0): the
/// cap counts the bytes read. A file that grows while it is read is the same case.
#[test]
fn the_cap_counts_bytes_read_not_the_size_reported() -> TestResult {
    let status = Path::new("/proc/self/status");
    if !status.exists() {
        return Ok(());
    }
    assert_eq!(std::fs::metadata(status)?.len(), 0);
    let refused = read_text_trusted(status, SMALL);
    assert!(
        matches!(refused, Err(RepoFileError::TooLarge { cap: 16, .. })),
        "{refused:?}"
    );
    Ok(())
}

/// The labels.txt -> /some/secret: refused, and the refusal says neither where the
/// link leads nor anything it holds.
#[test]
fn a_link_out_of_the_folder_is_refused_without_naming_its_target() -> TestResult {
    let fixture = Fixture::new("escape")?;
    let secret = fixture.outside().join("secret");
    symlink(&secret, fixture.model().join("labels.txt"))?;
    symlink(fixture.outside(), fixture.model().join("shared"))?;
    symlink(
        fixture.outside().join("missing"),
        fixture.model().join("dangling"),
    )?;
    symlink("/dev/zero", fixture.model().join("zero"))?;
    for name in [
        "labels.txt",
        "../outside/secret",
        "sub/../../outside/secret",
        "shared/secret",
        // Whether the target exists is not told apart from one that does.
        "shared/missing",
        "dangling",
        "zero",
    ] {
        let refused = read_inside(&fixture.model(), Path::new(name), LABELS);
        assert!(
            matches!(refused, Err(RepoFileError::Outside { .. })),
            "{name}: {refused:?}"
        );
        let message = refused.err().map(|err| err.to_string()).unwrap_or_default();
        let target = secret.display().to_string();
        assert!(
            !message.contains(&target) && !message.contains("root:secret"),
            "{message}"
        );
        assert!(
            message.contains("does not lead to a file inside"),
            "{message}"
        );
    }
    let refused = output_inside(&fixture.model(), Path::new("shared/optimized.onnx"));
    assert!(
        matches!(refused, Err(RepoFileError::Outside { .. })),
        "{refused:?}"
    );
    Ok(())
}

#[test]
fn a_missing_file_is_reported_missing() -> TestResult {
    let fixture = Fixture::new("missing")?;
    let missing = read_inside(&fixture.model(), Path::new("config.pbtxt"), SETTINGS);
    assert!(
        missing.as_ref().is_err_and(RepoFileError::is_not_found),
        "{missing:?}"
    );
    let no_folder = read_inside(&fixture.base.join("gone"), Path::new("x"), SETTINGS);
    assert!(
        no_folder.as_ref().is_err_and(RepoFileError::is_not_found),
        "{no_folder:?}"
    );
    Ok(())
}

/// The issue's `mkfifo MODEL/config.pbtxt`: refused at once, with no writer ever coming.
#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() -> TestResult {
    let fixture = Fixture::new("fifo")?;
    let model = fixture.model();
    make_fifo(&model.join("config.pbtxt"))?;
    let inside = unblocked({
        let model = model.clone();
        move || read_inside(&model, Path::new("config.pbtxt"), SETTINGS)
    });
    let trusted = unblocked({
        let model = model.clone();
        move || read_text_trusted(&model.join("config.pbtxt"), OPERATOR_FILE)
    });
    for refused in [inside, trusted.map(|result| result.map(String::into_bytes))] {
        let refused = refused.ok_or("the read of a FIFO blocked")?;
        assert!(
            matches!(
                refused,
                Err(RepoFileError::NotRegular { kind: "a FIFO", .. })
            ),
            "{refused:?}"
        );
    }
    let message = read_inside(&model, Path::new("config.pbtxt"), SETTINGS)
        .err()
        .map(|err| err.to_string())
        .unwrap_or_default();
    assert!(
        message.contains("config.pbtxt is a FIFO, not a regular file"),
        "{message}"
    );
    Ok(())
}

/// The labels.txt -> /dev/zero, where the device lies inside the folder read from.
#[test]
fn a_device_is_refused_unopened() -> TestResult {
    let zero = Path::new("/dev/zero");
    if !zero.exists() {
        return Ok(());
    }
    let refused = read_inside(Path::new("/dev"), Path::new("zero"), LABELS);
    assert!(
        matches!(
            refused,
            Err(RepoFileError::NotRegular {
                kind: "a device",
                ..
            })
        ),
        "{refused:?}"
    );
    let refused = read_text_trusted(zero, OPERATOR_FILE);
    assert!(
        matches!(
            refused,
            Err(RepoFileError::NotRegular {
                kind: "a device",
                ..
            })
        ),
        "{refused:?}"
    );
    Ok(())
}

#[test]
fn a_folder_and_text_that_is_not_utf8_are_refused() -> TestResult {
    let fixture = Fixture::new("kinds")?;
    std::fs::write(fixture.model().join("bytes"), [0xff, 0xfe])?;
    let folder = read_inside(&fixture.model(), Path::new("sub"), SMALL);
    assert!(
        matches!(
            folder,
            Err(RepoFileError::NotRegular {
                kind: "a folder",
                ..
            })
        ),
        "{folder:?}"
    );
    let binary = read_text_inside(&fixture.model(), Path::new("bytes"), SMALL);
    assert!(
        matches!(binary, Err(RepoFileError::NotText { .. })),
        "{binary:?}"
    );
    Ok(())
}

/// ONNX Runtime writes its optimized graph wherever it is told: through a link, into a FIFO.
#[test]
fn an_output_file_stays_inside_and_is_never_a_link_or_a_fifo() -> TestResult {
    let fixture = Fixture::new("output")?;
    let model = fixture.model();
    let canonical = std::fs::canonicalize(&model)?;
    assert_eq!(
        output_inside(&model, Path::new("sub/optimized.onnx"))?,
        canonical.join("sub").join("optimized.onnx")
    );
    std::fs::write(model.join("existing.onnx"), "old graph")?;
    assert_eq!(
        output_inside(&model, Path::new("existing.onnx"))?,
        canonical.join("existing.onnx")
    );
    symlink(fixture.outside().join("secret"), model.join("linked.onnx"))?;
    let linked = output_inside(&model, Path::new("linked.onnx"));
    assert!(
        matches!(linked, Err(RepoFileError::Outside { .. })),
        "{linked:?}"
    );
    make_fifo(&model.join("fifo.onnx"))?;
    let fifo = output_inside(&model, Path::new("fifo.onnx"));
    assert!(
        matches!(fifo, Err(RepoFileError::NotRegular { kind: "a FIFO", .. })),
        "{fifo:?}"
    );
    Ok(())
}
