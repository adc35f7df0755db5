//! How the embedded store names the file of a folder marker.
//!
//! s3s-fs maps a key to the path of the same name, so a key ending in `/` (`dir/`, the
//! zero-byte object that S3 consoles and rclone's `--s3-directory-markers` create) would be
//! the directory itself, which can hold no body, and kura's body of an empty object is not
//! empty. The store keeps `dir/` as the file [`FOLDER_MARKER`] inside that directory
//! instead: every key a call names is turned into its stored form before s3s-fs or the
//! store's own code sees it, and every key an answer names is turned back. Keys with a
//! segment of that name are refused, so the mapping stays one to one.

use std::borrow::Cow;

use s3s::{S3Result, s3_error};

/// The file that holds the object of the key naming its directory (`dir/` is
/// `dir/.kura-folder-marker`).
pub(super) const FOLDER_MARKER: &str = ".kura-folder-marker";

/// The key under which the store keeps `key`.
pub(super) fn stored(key: &str) -> Cow<'_, str> {
    if key.ends_with('/') {
        Cow::Owned(format!("{key}{FOLDER_MARKER}"))
    } else {
        Cow::Borrowed(key)
    }
}

/// The client's key of a stored key: the inverse of [`stored`].
pub(super) fn client(stored: &str) -> &str {
    stored
        .strip_suffix(FOLDER_MARKER)
        .filter(|k| k.ends_with('/'))
        .unwrap_or(stored)
}

/// Refuses a key that names the marker file itself, or a directory of that name (which
/// would be where `dir/`'s marker lies).
pub(super) fn not_reserved(key: &str) -> S3Result<()> {
    if key.split('/').any(|segment| segment == FOLDER_MARKER) {
        return Err(s3_error!(
            InvalidArgument,
            "the embedded store keeps folder markers as `{FOLDER_MARKER}` files; keys with a segment of that name are not accepted"
        ));
    }
    Ok(())
}

/// Turns the key of `slot` into its stored form, refusing a reserved key.
pub(super) fn store_key(slot: &mut String) -> S3Result<()> {
    not_reserved(slot)?;
    if let Cow::Owned(k) = stored(slot) {
        *slot = k;
    }
    Ok(())
}

/// As [`store_key`] for a read: a reserved key is never stored, so it is not there.
pub(super) fn store_read_key(slot: &mut String) -> S3Result<()> {
    store_key(slot).map_err(|_| s3_error!(NoSuchKey))
}

/// Turns a stored key in an answer back into the client's.
pub(super) fn client_key(slot: &mut Option<String>) {
    if let Some(k) = slot {
        let c = client(k);
        if c.len() != k.len() {
            *k = c.to_string();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_markers_are_files_inside_their_directory() {
        assert_eq!(stored("dir/"), "dir/.kura-folder-marker");
        assert_eq!(stored("a/b/"), "a/b/.kura-folder-marker");
        assert_eq!(stored("dir"), "dir");
        for key in ["dir/", "a/b/", "dir", "a/b", "x.kura-folder-marker"] {
            assert_eq!(client(&stored(key)), key);
        }
        assert!(not_reserved("dir/.kura-folder-marker").is_err());
        assert!(not_reserved(".kura-folder-marker/x").is_err());
        assert!(not_reserved("dir/x.kura-folder-marker").is_ok());
    }
}
