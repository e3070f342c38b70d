//! Scenarios 16–20 of docs/recovery.md ("plugin sandbox") and the three
//! outcomes of a plugin call (ok, error value, trap), through the real host
//! and the real `faulty-enumerator`, `file-enumerator`, `wrong-world` and
//! `not-a-plugin` components.

use std::time::{Duration, Instant};

use crate::support::{grant, host, plugin_path, spec};
use coordhost::plugin::{
    EnumeratorAction, PluginError, PluginFailure, PluginKind, SplitPayload, TrapPolicy,
};

const ENUM: PluginKind = PluginKind::SplitEnumerator;

/// The fault-injecting enumerator with `on-trap = "rebuild"` (tests of
/// `fail` set it).
fn faulty(config: &[(&str, &str)]) -> coordhost::plugin::PluginSpec {
    let mut s = spec("faulty-enumerator", ENUM, config);
    s.limits.on_trap = TrapPolicy::Rebuild;
    s
}

fn inline_lines(actions: &[EnumeratorAction]) -> Vec<String> {
    actions
        .iter()
        .flat_map(|a| match a {
            EnumeratorAction::Assign { splits, .. } => splits.clone(),
            EnumeratorAction::NoMoreSplits { .. } => Vec::new(),
        })
        .map(|s| match s.payload {
            SplitPayload::Inline(text) => text,
            SplitPayload::FileRange(r) => panic!("unexpected file range {r:?}"),
        })
        .collect()
}

#[test]
fn a_call_returns_ok_an_error_value_or_a_trap_and_the_host_tells_them_apart() {
    let ok = host()
        .load(&faulty(&[("splits", "3"), ("fault", "none")]))
        .unwrap();
    let mut e = ok.split_enumerator(2).unwrap();
    e.start().unwrap();
    e.add_reader(0).unwrap();
    assert_eq!(
        inline_lines(&e.handle_split_request(0, None).unwrap()),
        vec!["line-0"]
    );

    let missing_dir = host().load(&spec("file-enumerator", ENUM, &[])).unwrap();
    match missing_dir.split_enumerator(1) {
        Err(PluginError::Returned {
            plugin,
            call,
            error: PluginFailure::InvalidConfig(msg),
        }) => {
            assert_eq!(plugin, "file-enumerator");
            assert_eq!(call, "create");
            assert!(msg.contains("dir"), "the error value names the key: {msg}");
        }
        other => panic!(
            "expected an invalid-config error value, got {other:?}",
            other = other.err()
        ),
    }

    let trapping = host()
        .load(&faulty(&[
            ("splits", "3"),
            ("fault", "trap"),
            ("on", "handle-split-request"),
        ]))
        .unwrap();
    let mut e = trapping.split_enumerator(1).unwrap();
    e.start().unwrap();
    match e.handle_split_request(0, None) {
        Err(PluginError::Trap {
            plugin,
            call,
            message,
            rebuilt,
        }) => {
            assert_eq!(
                (plugin.as_str(), call),
                ("faulty-enumerator", "handle-split-request")
            );
            assert!(
                message.contains("faulty-enumerator: trap on handle-split-request"),
                "trap message kept: {message}"
            );
            // No snapshot was taken: the store is rebuilt from a fresh
            // `create` (issue 9, item 3).
            assert!(rebuilt, "rebuilt from a fresh create");
        }
        other => panic!("expected a trap, got {other:?}"),
    }
}

/// Scenario 16, policy `fail`: the host never hangs, and the plugin stays unusable.
#[test]
fn a_call_that_loops_forever_ends_with_a_deadline_error_and_poisons_the_plugin() {
    let mut s = faulty(&[
        ("splits", "3"),
        ("fault", "loop"),
        ("on", "handle-split-request"),
    ]);
    s.limits.call_timeout = Duration::from_millis(200);
    s.limits.on_trap = TrapPolicy::Fail;
    let mut e = host().load(&s).unwrap().split_enumerator(1).unwrap();
    e.start().unwrap();
    e.snapshot_state(-1).unwrap();
    let began = Instant::now();
    let err = e.handle_split_request(0, None).unwrap_err();
    let took = began.elapsed();
    assert!(
        matches!(
            err,
            PluginError::Deadline {
                timeout_ms: 200,
                rebuilt: false,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        took >= Duration::from_millis(200),
        "interrupted before its deadline: {took:?}"
    );
    assert!(took < Duration::from_secs(30), "the host hung: {took:?}");
    assert!(err.to_string().contains("faulty-enumerator"));
    assert!(matches!(
        e.unassigned_splits(),
        Err(PluginError::Poisoned { .. })
    ));
}

/// Scenario 16, policy `rebuild`: the store is rebuilt from the snapshot.
#[test]
fn after_a_deadline_the_plugin_is_rebuilt_from_its_last_snapshot() {
    // The first `add-reader` succeeds (splits go only to registered readers); the second loops.
    let mut s = faulty(&[
        ("splits", "5"),
        ("fault", "loop"),
        ("on", "add-reader"),
        ("trap-after", "1"),
    ]);
    s.limits.call_timeout = Duration::from_millis(150);
    let mut e = host().load(&s).unwrap().split_enumerator(1).unwrap();
    e.start().unwrap();
    e.add_reader(0).unwrap();
    e.handle_split_request(0, None).unwrap();
    e.snapshot_state(-1).unwrap();
    let err = e.add_reader(0).unwrap_err();
    assert!(
        matches!(err, PluginError::Deadline { rebuilt: true, .. }),
        "{err:?}"
    );
    // State is the snapshot's: split 0 handed out, 4 left; split 1 comes next.
    assert_eq!(e.unassigned_splits().unwrap(), 4);
    assert_eq!(
        inline_lines(&e.handle_split_request(0, None).unwrap()),
        vec!["line-1"]
    );
}

fn vm_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// Scenario 17.
#[test]
fn a_plugin_that_grows_memory_past_its_cap_gets_a_clear_error_and_host_memory_stays_bounded() {
    let mut s = faulty(&[
        ("splits", "3"),
        ("fault", "grow-memory"),
        ("on", "handle-split-request"),
    ]);
    s.limits.memory_bytes = 64 << 20;
    s.limits.on_trap = TrapPolicy::Fail;
    let plugin = host().load(&s).unwrap();
    let before = vm_rss_bytes();
    for _ in 0..6 {
        let mut e = plugin.split_enumerator(1).unwrap();
        e.start().unwrap();
        let err = e.handle_split_request(0, None).unwrap_err();
        assert!(
            matches!(err, PluginError::MemoryCap { cap_bytes, .. } if cap_bytes == 64 << 20),
            "{err:?}"
        );
        assert!(err.to_string().contains("memory past its cap"), "{err}");
    }
    let grown = vm_rss_bytes().saturating_sub(before);
    // Six instances each filled 64 MiB; all of it is returned when the store goes.
    assert!(grown < 160 << 20, "host RSS grew by {} MiB", grown >> 20);
}

/// Scenario 18, both outcomes.
#[test]
fn a_plugin_that_traps_mid_job_is_restored_from_its_last_snapshot_or_fails_naming_itself() {
    let config = [
        ("splits", "6"),
        ("fault", "trap"),
        ("on", "handle-split-request"),
        ("trap-after", "2"),
    ];
    let plugin = host().load(&faulty(&config)).unwrap();
    let mut e = plugin.split_enumerator(1).unwrap();
    e.start().unwrap();
    e.add_reader(0).unwrap();
    assert_eq!(
        inline_lines(&e.handle_split_request(0, None).unwrap()),
        vec!["line-0"]
    );
    e.snapshot_state(-1).unwrap();
    assert_eq!(
        inline_lines(&e.handle_split_request(0, None).unwrap()),
        vec!["line-1"]
    );
    let err = e.handle_split_request(0, None).unwrap_err();
    assert!(
        matches!(err, PluginError::Trap { rebuilt: true, .. }),
        "{err:?}"
    );
    // Back at the snapshot: line-1 was handed out after it, so it comes again.
    assert_eq!(e.unassigned_splits().unwrap(), 5);
    assert_eq!(
        inline_lines(&e.handle_split_request(0, None).unwrap()),
        vec!["line-1"]
    );

    let mut failing = faulty(&config);
    failing.limits.on_trap = TrapPolicy::Fail;
    let mut e = host().load(&failing).unwrap().split_enumerator(1).unwrap();
    e.start().unwrap();
    e.add_reader(0).unwrap();
    e.snapshot_state(-1).unwrap();
    e.handle_split_request(0, None).unwrap();
    e.handle_split_request(0, None).unwrap();
    let err = e.handle_split_request(0, None).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("faulty-enumerator") && text.contains("trap on handle-split-request"),
        "{text}"
    );
    let later = e.handle_split_request(0, None).unwrap_err().to_string();
    assert!(
        later.contains("trapped earlier") && later.contains("faulty-enumerator"),
        "{later}"
    );
}

/// Scenario 19.
#[test]
fn components_of_the_wrong_world_or_version_and_non_components_are_refused_at_load() {
    let wrong_version = host().check(&plugin_path("wrong-world")).unwrap_err();
    match &wrong_version {
        PluginError::IncompatibleVersion {
            interface,
            found,
            expected,
            ..
        } => {
            assert_eq!(interface, "coordhost:plugin/split-enumerator");
            assert_eq!(
                (found.as_str(), expected.as_str()),
                ("0.2.0", "0.1.0 or 0.1.1 or 0.1.2 or 0.1.3")
            );
        }
        other => panic!("expected an incompatible version, got {other:?}"),
    }
    let other_world = host().check(&plugin_path("not-a-plugin")).unwrap_err();
    let text = other_world.to_string();
    assert!(
        matches!(other_world, PluginError::WrongWorld { .. }),
        "{other_world:?}"
    );
    assert!(
        text.contains("coordhost:plugin/split-enumerator@0.1.3") && text.contains("greeter"),
        "{text}"
    );

    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.wasm");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        host().check(&empty),
        Err(PluginError::Empty { .. })
    ));
    let text_file = dir.path().join("notes.wasm");
    std::fs::write(&text_file, b"this is not wasm").unwrap();
    let err = host().check(&text_file).unwrap_err();
    assert!(
        matches!(err, PluginError::NotAComponent { .. }) && err.to_string().contains("notes.wasm"),
        "{err}"
    );
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let err = host().check(&core).unwrap_err();
    assert!(err.to_string().contains("core WebAssembly module"), "{err}");
    let missing = dir.path().join("missing.wasm");
    assert!(matches!(
        host().check(&missing),
        Err(PluginError::Read { .. })
    ));

    let as_shuffle = spec("file-enumerator", PluginKind::ShuffleMaster, &[]);
    let err = host().load(&as_shuffle).unwrap_err();
    assert!(matches!(err, PluginError::KindMismatch { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("configured as a shuffle-master but the component is a split-enumerator"),
        "{err}"
    );
}

/// Scenario 20.
#[test]
fn a_plugin_with_no_directory_granted_cannot_read_the_hosts_files() {
    let dir = tempfile::Builder::new()
        .prefix("coordhost-grant")
        .tempdir()
        .unwrap();
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "the host's secret\nmore\n").unwrap();
    let path = secret.to_str().unwrap();
    let config = [
        ("splits", "1"),
        ("fault", "read-file"),
        ("on", "handle-split-request"),
        ("path", path),
    ];

    let mut e = host()
        .load(&faulty(&config))
        .unwrap()
        .split_enumerator(1)
        .unwrap();
    e.start().unwrap();
    match e.handle_split_request(0, None) {
        Err(PluginError::Returned {
            error: PluginFailure::Io(msg),
            ..
        }) => assert!(!msg.contains("secret"), "{msg}"),
        other => {
            panic!("reading an ungranted file must fail with an io error value, got {other:?}")
        }
    }
    for absolute in ["/etc/passwd", "/proc/self/environ"] {
        let config = [
            ("splits", "1"),
            ("fault", "read-file"),
            ("on", "handle-split-request"),
            ("path", absolute),
        ];
        let mut e = host()
            .load(&faulty(&config))
            .unwrap()
            .split_enumerator(1)
            .unwrap();
        e.start().unwrap();
        assert!(
            matches!(
                e.handle_split_request(0, None),
                Err(PluginError::Returned { .. })
            ),
            "{absolute} was readable"
        );
    }

    let mut granted = faulty(&config);
    granted.dirs.push(grant(dir.path(), false));
    let mut e = host().load(&granted).unwrap().split_enumerator(1).unwrap();
    e.start().unwrap();
    e.add_reader(0).unwrap();
    assert_eq!(
        inline_lines(&e.handle_split_request(0, None).unwrap()),
        vec!["the host's secret"]
    );
}

#[test]
fn an_enumerator_that_assigns_beyond_the_parallelism_breaks_the_contract() {
    // file-enumerator assigns to the asking subtask; asking as subtask 3 of
    // a parallelism-2 source makes it name a subtask that does not exist.
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("a.txt"), "x\n").unwrap();
    let mut s = spec(
        "file-enumerator",
        ENUM,
        &[("dir", data.path().to_str().unwrap())],
    );
    s.dirs.push(grant(data.path(), false));
    let mut e = host().load(&s).unwrap().split_enumerator(2).unwrap();
    e.start().unwrap();
    let err = e.handle_split_request(3, None).unwrap_err();
    assert!(
        matches!(err, PluginError::Protocol { .. }) && err.to_string().contains("parallelism 2"),
        "{err}"
    );
}
