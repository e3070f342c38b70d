//! Issue 31's browser test (docs/ui.md, "The browser test"): headless
//! Chromium (Debian's `chromium`, installed by `make browser-deps`) loads
//! the page of a job that recovered after a SIGKILL, as `coordhost run
//! --ui` serves it, and the test reads the DOM Chromium built (each job
//! vertex drawn, the subtasks recovery kept marked `skipped`, the reset
//! ones with their reasons) and saves a screenshot, checked to be a whole
//! PNG of the window's size with more drawn on it than a blank page.
//!
//! Chromium is driven by its command line (`--dump-dom`, `--screenshot`),
//! each run with a fresh profile folder. Without `chromium` the test fails
//! saying how to install it; it never skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::ui::{Recovered, http};

/// The window of the screenshot, pixels.
const WIDTH: u32 = 1100;
const HEIGHT: u32 = 900;

/// Where the committed copy of the screenshot lives (README shows it).
const DOCS_SCREENSHOT: &str = "docs/img/ui-recovered-job.png";

/// The Chromium binary: `$COORDHOST_CHROMIUM` or `chromium` on `PATH`.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("COORDHOST_CHROMIUM") {
        return PathBuf::from(p);
    }
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "the browser test needs headless Chromium and `chromium` is not on PATH: \
             run `make browser-deps` (scripts/install-browser-deps.sh installs Debian's \
             chromium) or set COORDHOST_CHROMIUM to a Chromium binary"
        )
    })
}

/// Runs headless Chromium with a fresh profile in `profile` and `args`;
/// returns its stdout. Fails naming the command when it does not end
/// within 120 s or exits non-zero.
fn run_chromium(profile: &Path, args: &[String]) -> String {
    let mut command = Command::new(chromium());
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let shown = format!("{command:?}");
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _gone = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(out) => out.unwrap_or_else(|e| panic!("{shown}: {e}")),
        Err(_) => {
            // Only the process this test started, by its id.
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("{shown} did not end within 120 s");
        }
    };
    assert!(
        out.status.success(),
        "{shown}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("{shown}: stdout not UTF-8: {e}"))
}

/// CRC-32 (IEEE 802.3, reflected, as PNG chunks carry it).
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Checks `png` is a whole PNG file (signature, chunks with correct CRCs,
/// `IHDR` first, `IEND` last) and returns its width, height and the bytes
/// of its compressed image data (`IDAT`).
fn read_png(png: &[u8]) -> (u32, u32, usize) {
    const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    assert!(png.starts_with(&SIGNATURE), "no PNG signature");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let mut at = SIGNATURE.len();
    let mut chunks = Vec::new();
    let (mut width, mut height, mut idat) = (0, 0, 0);
    while at < png.len() {
        assert!(at + 12 <= png.len(), "a chunk header is cut at byte {at}");
        let len = be(&png[at..]) as usize;
        let kind = String::from_utf8_lossy(&png[at + 4..at + 8]).into_owned();
        let end = at + 8 + len;
        assert!(end + 4 <= png.len(), "chunk {kind} is cut at byte {at}");
        assert_eq!(
            crc32(&png[at + 4..end]),
            be(&png[end..]),
            "chunk {kind} at byte {at}: bad CRC"
        );
        match kind.as_str() {
            "IHDR" => {
                width = be(&png[at + 8..]);
                height = be(&png[at + 12..]);
            }
            "IDAT" => idat += len,
            _ => {}
        }
        chunks.push(kind);
        at = end + 4;
    }
    assert_eq!(
        chunks.first().map(String::as_str),
        Some("IHDR"),
        "{chunks:?}"
    );
    assert_eq!(
        chunks.last().map(String::as_str),
        Some("IEND"),
        "{chunks:?}"
    );
    (width, height, idat)
}

/// The elements of `dom` that start with `<TAG` and carry `attr`, each as
/// its start tag.
fn start_tags<'a>(dom: &'a str, tag: &str, attr: &str) -> Vec<&'a str> {
    dom.split(&format!("<{tag} "))
        .skip(1)
        .filter_map(|rest| rest.split('>').next())
        .filter(|t| t.contains(attr))
        .collect()
}

#[test]
fn headless_chromium_shows_a_recovered_jobs_vertices_kept_and_reset_subtasks_and_reasons() {
    // Fail first, before the minutes of the job, when there is no browser.
    let browser = chromium();
    assert!(
        browser.is_file(),
        "{}: no such file (COORDHOST_CHROMIUM)",
        browser.display()
    );
    let rec = Recovered::start(|_| {});
    let url = format!("http://{}/", rec.addr);
    let (status, _, body) = http(&rec.addr, "GET", "/api/job");
    assert_eq!(status, 200, "{body}");
    let api: Value = serde_json::from_str(&body).expect("/api/job is JSON");
    let tmp = tempfile::tempdir().expect("tempdir");

    // The DOM after Chromium parsed (and would have run) the page.
    let dom = run_chromium(
        &tmp.path().join("profile-dom"),
        &["--dump-dom".to_owned(), url.clone()],
    );
    assert!(dom.contains("<svg"), "{dom}");
    assert!(
        dom.contains("data-status=\"finished\""),
        "the page says the job finished: {dom}"
    );

    // Each job vertex is drawn, with the figures of the summary.
    let vertices = rec.summary["vertices"].as_array().expect("vertices");
    assert_eq!(vertices.len(), 2, "{:#}", rec.summary);
    let boxes = start_tags(&dom, "g", "class=\"vertex\"");
    assert_eq!(boxes.len(), vertices.len(), "{boxes:?}");
    for v in vertices {
        let id = v["id"].as_str().expect("id");
        let tag = boxes
            .iter()
            .find(|t| t.contains(&format!("data-vertex=\"{id}\"")))
            .unwrap_or_else(|| panic!("no box for vertex {id}: {dom}"));
        assert!(
            tag.contains(&format!("data-parallelism=\"{}\"", v["parallelism"])),
            "{id}: {tag}"
        );
        assert!(
            tag.contains(&format!("data-skipped=\"{}\"", v["skipped"])),
            "{id}: {tag}"
        );
    }

    // The subtasks recovery kept are marked skipped, one row each, and
    // drawn as a skipped segment of their vertex's bar.
    let skipped_rows = start_tags(&dom, "tr", "class=\"skipped\"");
    assert_eq!(
        skipped_rows.len() as u64,
        rec.n("tasks_skipped"),
        "{skipped_rows:?}"
    );
    assert!(
        skipped_rows.iter().all(|r| r.contains(&format!(
            "data-vertex=\"{}\"",
            crate::support::crash::SOURCE
        ))),
        "recovery kept only source subtasks: {skipped_rows:?}"
    );
    assert!(
        !start_tags(&dom, "rect", "class=\"bar skipped\"").is_empty(),
        "{dom}"
    );

    // The reset ones too, each with its reason shown.
    let reset_rows = start_tags(&dom, "tr", "class=\"reset\"");
    assert_eq!(
        reset_rows.len() as u64,
        api["recovery"]["reset"].as_u64().expect("recovery.reset"),
        "{reset_rows:?}"
    );
    assert!(!reset_rows.is_empty(), "recovery reset the sink: {dom}");
    assert!(
        !start_tags(&dom, "rect", "class=\"bar reset\"").is_empty(),
        "{dom}"
    );
    let reasons = api["recovery"]["reset_reasons"]
        .as_object()
        .expect("reasons");
    assert!(!reasons.is_empty(), "{api:#}");
    for reason in reasons.keys() {
        assert!(
            dom.contains(&format!("<td>reset: {reason}</td>")),
            "the decisions table names `{reason}`: {dom}"
        );
    }
    // Under each box, its own resets by reason.
    for v in api["vertices"].as_array().expect("vertices") {
        let mut by_reason = std::collections::BTreeMap::<&str, u64>::new();
        for s in v["subtasks"].as_array().expect("subtasks") {
            if let Some(reason) = s["recovery"]["reason"].as_str() {
                *by_reason.entry(reason).or_default() += 1;
            }
        }
        let id = v["id"].as_str().expect("id");
        let drawn = dom
            .split(&format!("data-vertex=\"{id}\""))
            .nth(1)
            .and_then(|rest| rest.split("</g>").next())
            .unwrap_or_else(|| panic!("no box for {id}"));
        for (reason, n) in by_reason {
            assert!(
                drawn.contains(&format!("reset: {reason} ×{n}")),
                "{id}'s box names `{reason}` ×{n}: {drawn}"
            );
        }
    }

    // The screenshot: a whole PNG of the window's size, with more drawn on
    // it than on a blank page of that size.
    let size = format!("--window-size={WIDTH},{HEIGHT}");
    let shot = tmp.path().join("page.png");
    run_chromium(
        &tmp.path().join("profile-shot"),
        &[
            format!("--screenshot={}", shot.display()),
            size.clone(),
            url,
        ],
    );
    let png = std::fs::read(&shot).expect("the screenshot was written");
    let (w, h, idat) = read_png(&png);
    assert_eq!((w, h), (WIDTH, HEIGHT), "the screenshot's size");
    let blank = tmp.path().join("blank.png");
    run_chromium(
        &tmp.path().join("profile-blank"),
        &[
            format!("--screenshot={}", blank.display()),
            size,
            "about:blank".to_owned(),
        ],
    );
    let (bw, bh, blank_idat) = read_png(&std::fs::read(&blank).expect("blank screenshot"));
    assert_eq!((bw, bh), (WIDTH, HEIGHT));
    assert!(
        idat > 4 * blank_idat,
        "the page's picture ({idat} bytes of image data) is not much more than a blank page's ({blank_idat})"
    );

    // Kept next to the test's other outputs; with
    // COORDHOST_UPDATE_SCREENSHOT=1 also as the README's picture.
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-recovered-job.png");
    std::fs::write(&out, &png).expect("save the screenshot");
    eprintln!("screenshot: {}", out.display());
    if std::env::var_os("COORDHOST_UPDATE_SCREENSHOT").is_some() {
        let docs = crate::support::workspace().join(DOCS_SCREENSHOT);
        std::fs::write(&docs, &png).expect("save the docs screenshot");
        eprintln!("screenshot: {}", docs.display());
    }
    rec.stop();
}
