//! Look-up of keys in a plugin's config map (the WIT `config` type: the
//! `config` table of the plugin's entry in the job file, as key/value
//! strings). Every failure is a message for `error::invalid-config` that
//! names the key and says what is wrong.

use std::str::FromStr;

/// The value of `key`, if present. When a key repeats, the last one wins, as
/// in a table that is read top to bottom.
pub fn value<'a>(config: &'a [(String, String)], key: &str) -> Option<&'a str> {
    config
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The value of `key`, which must be present.
///
/// # Errors
///
/// A message naming the key when it is missing.
pub fn required<'a>(config: &'a [(String, String)], key: &str) -> Result<&'a str, String> {
    value(config, key).ok_or_else(|| format!("missing config key `{key}`"))
}

/// The value of `key` as an absolute path (on the host and, since the host
/// grants directories at the same path, in the guest). A trailing `/` is
/// removed, except from `/` itself.
///
/// # Errors
///
/// A message naming the key when it is missing, empty or relative.
pub fn absolute_path(config: &[(String, String)], key: &str) -> Result<String, String> {
    let raw = required(config, key)?;
    if !raw.starts_with('/') {
        return Err(format!(
            "config key `{key}` must be an absolute path, got `{raw}`"
        ));
    }
    let trimmed = raw.trim_end_matches('/');
    Ok(if trimmed.is_empty() { "/" } else { trimmed }.to_owned())
}

/// Checks that every key of `config` is one of `known`: a misspelt key
/// (`split-byte` for `split-bytes`) would otherwise be ignored and its
/// default used without a word.
///
/// # Errors
///
/// A message naming the first unknown key and listing the known ones.
pub fn only_keys(config: &[(String, String)], known: &[&str]) -> Result<(), String> {
    match config.iter().find(|(k, _)| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some((key, _)) => Err(format!(
            "unknown config key `{key}` (this plugin reads: {})",
            known.join(", ")
        )),
    }
}

/// The value of `key` parsed as `T`, or `default` when the key is absent.
///
/// # Errors
///
/// A message naming the key and the bad value when it does not parse.
pub fn parsed_or<T>(config: &[(String, String)], key: &str, default: T) -> Result<T, String>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    match value(config, key) {
        None => Ok(default),
        Some(raw) => raw
            .trim()
            .parse()
            .map_err(|e| format!("config key `{key}` has bad value `{raw}`: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_key_is_named() {
        let c = vec![
            ("dir".to_owned(), "/d".to_owned()),
            ("split-byte".to_owned(), "5".to_owned()),
        ];
        assert!(only_keys(&c[..1], &["dir", "split-bytes"]).is_ok());
        let err = only_keys(&c, &["dir", "split-bytes"]).unwrap_err();
        assert_eq!(
            err,
            "unknown config key `split-byte` (this plugin reads: dir, split-bytes)"
        );
    }

    fn cfg(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn last_value_of_a_repeated_key_wins() {
        let c = cfg(&[("a", "1"), ("a", "2")]);
        assert_eq!(value(&c, "a"), Some("2"));
        assert_eq!(value(&c, "b"), None);
    }

    #[test]
    fn relative_paths_are_refused_and_trailing_slashes_trimmed() {
        assert!(absolute_path(&cfg(&[("dir", "data")]), "dir").is_err());
        assert!(absolute_path(&cfg(&[]), "dir").is_err());
        assert_eq!(absolute_path(&cfg(&[("dir", "/d/")]), "dir").unwrap(), "/d");
        assert_eq!(absolute_path(&cfg(&[("dir", "/")]), "dir").unwrap(), "/");
    }

    #[test]
    fn parsed_values_fall_back_to_the_default_and_name_bad_keys() {
        assert_eq!(parsed_or(&cfg(&[]), "n", 7u64).unwrap(), 7);
        assert_eq!(parsed_or(&cfg(&[("n", " 9 ")]), "n", 7u64).unwrap(), 9);
        let err = parsed_or(&cfg(&[("n", "x")]), "n", 7u64).unwrap_err();
        assert!(err.contains("`n`"), "{err}");
    }
}
