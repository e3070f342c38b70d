//! `s3://BUCKET/KEY`: an object (or a folder of objects) of S3-compatible
//! storage as a job file, the job graph and a plugin name it. A plain value:
//! parsing and the folder rule only; the clients live in the binary's
//! `objstore` module (docs/object-storage.md).

use std::fmt;

/// The scheme of an object URL.
pub const SCHEME: &str = "s3://";
/// Longest key, bytes (S3's own bound).
pub const MAX_KEY_BYTES: usize = 1024;
/// True if `text` is meant as an object URL (`s3://...`).
#[must_use]
pub fn is_object_url(text: &str) -> bool {
    text.starts_with(SCHEME)
}

/// An object (or a folder of objects) named by `s3://BUCKET/KEY`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ObjectUrl {
    /// The bucket.
    pub bucket: String,
    /// The key (no leading `/`; empty for the whole bucket).
    pub key: String,
}

impl fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.bucket, self.key)
    }
}

/// Whether `c` may appear in a key: letters and digits of any script and
/// `- _ . = + , @ : ! $ ' ( ) * & ;`. Nothing that `object_store` would
/// percent-encode (so the key a plugin names is the key in the bucket), no
/// `\`, `%`, control character or space.
fn key_char(c: char) -> bool {
    c.is_alphanumeric() || "-_.=+,@:!$'()*&;".contains(c)
}

/// Checks `key` part by part: non-empty parts separated by single `/`,
/// none `.` or `..`, only [`key_char`]s, at most [`MAX_KEY_BYTES`].
fn check_key(key: &str) -> Result<(), String> {
    if key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "its key is {} bytes, more than {MAX_KEY_BYTES}",
            key.len()
        ));
    }
    for part in key.split('/') {
        if part.is_empty() {
            return Err("its key has an empty part (a leading, trailing or doubled `/`)".into());
        }
        if part == "." || part == ".." {
            return Err(format!("its key has a `{part}` part"));
        }
        if let Some(c) = part.chars().find(|&c| !key_char(c)) {
            return Err(format!(
                "its key holds {c:?}, which is not a letter, a digit or one of - _ . = + , @ : ! $ ' ( ) * & ;"
            ));
        }
    }
    Ok(())
}

/// `url` as a message quotes it: control characters escaped, cut to 200
/// characters, in backticks.
fn quote_url(url: &str) -> String {
    let mut out = String::from("`");
    for (n, c) in url.chars().enumerate() {
        if n == 200 {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('`');
    out
}

impl ObjectUrl {
    /// Parses `s3://BUCKET/KEY`. With `whole_bucket`, `s3://BUCKET` (and
    /// `s3://BUCKET/`) is accepted as the empty key; a trailing `/` of a
    /// key is dropped (a folder). Refuses a bucket name S3 refuses and a
    /// key that `check_key` refuses: the URL names exactly one key, the
    /// one it spells.
    ///
    /// # Errors
    /// A sentence naming the URL and what is wrong with it.
    pub fn parse(url: &str, whole_bucket: bool) -> Result<Self, String> {
        let shown = quote_url(url);
        let Some(rest) = url.strip_prefix(SCHEME) else {
            return Err(format!(
                "{shown} is not an object URL: expected s3://BUCKET/KEY"
            ));
        };
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !bucket.starts_with(['.', '-'])
            && !bucket.contains("..");
        if !valid_bucket {
            return Err(format!(
                "{shown}: the bucket name is not valid (3 to 63 lower-case letters, digits, `-` or `.`)"
            ));
        }
        let key = key.strip_suffix('/').unwrap_or(key);
        if key.is_empty() {
            if whole_bucket {
                return Ok(Self {
                    bucket: bucket.to_owned(),
                    key: String::new(),
                });
            }
            return Err(format!("{shown} names no key: expected s3://BUCKET/KEY"));
        }
        check_key(key).map_err(|why| format!("{shown}: {why}"))?;
        Ok(Self {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        })
    }

    /// Whether `self` is `prefix` itself or lies below it as a folder
    /// (`prefix` followed by `/`): `data` holds `data/x`, never `data-old/x`.
    #[must_use]
    pub fn within(&self, prefix: &Self, allow_equal: bool) -> bool {
        if self.bucket != prefix.bucket {
            return false;
        }
        if prefix.key.is_empty() {
            return allow_equal || !self.key.is_empty();
        }
        match self.key.strip_prefix(prefix.key.as_str()) {
            Some("") => allow_equal,
            Some(rest) => rest.starts_with('/'),
            None => false,
        }
    }
}
