//! The compiled-component cache: a second load of the same component by a
//! new host (as a new coordinator process) does not compile again, and a
//! damaged cache entry is compiled again rather than trusted.

use coordhost::plugin::{CacheOutcome, HostOptions, PluginHost, PluginKind, PluginSpec};

#[test]
fn a_second_host_loads_the_component_from_the_cache_without_compiling() {
    let cache = tempfile::tempdir().unwrap();
    let spec = PluginSpec::bare(
        &crate::support::plugin_path("static-enumerator"),
        PluginKind::SplitEnumerator,
    );
    let first = PluginHost::new(HostOptions {
        cache_dir: Some(cache.path().to_path_buf()),
    })
    .unwrap();
    assert_eq!(
        first.load(&spec).unwrap().cache_outcome(),
        CacheOutcome::Compiled
    );
    let mut names: Vec<String> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "one entry and its compile lock: {names:?}");
    assert!(
        names[0].ends_with(".cwasm") && names[1] == names[0].replace(".cwasm", ".lock"),
        "the second name is the entry's compile lock, no stray staging files: {names:?}"
    );

    let second = PluginHost::new(HostOptions {
        cache_dir: Some(cache.path().to_path_buf()),
    })
    .unwrap();
    assert_eq!(
        second.load(&spec).unwrap().cache_outcome(),
        CacheOutcome::Hit
    );

    let uncached = PluginHost::new(HostOptions { cache_dir: None }).unwrap();
    assert_eq!(
        uncached.load(&spec).unwrap().cache_outcome(),
        CacheOutcome::Compiled
    );
}

#[test]
fn a_damaged_cache_entry_is_compiled_again_and_replaced() {
    let cache = tempfile::tempdir().unwrap();
    let spec = PluginSpec::bare(
        &crate::support::plugin_path("static-enumerator"),
        PluginKind::SplitEnumerator,
    );
    let host = PluginHost::new(HostOptions {
        cache_dir: Some(cache.path().to_path_buf()),
    })
    .unwrap();
    host.load(&spec).unwrap();
    let entry = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .expect("a compiled entry");
    std::fs::write(&entry, b"not machine code").unwrap();

    let again = PluginHost::new(HostOptions {
        cache_dir: Some(cache.path().to_path_buf()),
    })
    .unwrap();
    let loaded = again.load(&spec).unwrap();
    assert_eq!(loaded.cache_outcome(), CacheOutcome::Compiled);
    assert!(
        !loaded.supports_batch_snapshot(),
        "the recompiled plugin works"
    );
    assert!(
        std::fs::metadata(&entry).unwrap().len() > 1000,
        "the entry was replaced"
    );
}
