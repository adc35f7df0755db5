//! Multipart upload IDs that carry the upload's secrets, so that any gateway replica
//! sharing the key file can encrypt any part without shared state.
//!
//! The client gets `UPSTREAM_ID.TOKEN`. `TOKEN` is base64url of an object header (SPEC
//! 5.1) that wraps the object's data key and salt under the active KEK, bound to the bucket
//! and to the name `"kura-upload" NUL LEN NUL KEY UPSTREAM_ID` (LEN: the key's length in
//! bytes, in decimal), so it opens only for this upload of this object and cannot be forged
//! or moved. base64url has no `.`, so the last `.` splits the two even when the upstream's
//! ID contains dots. (Tokens of earlier gateways named `KEY NUL "kura-upload" NUL ID`:
//! uploads they started cannot be continued after an upgrade; abort and start again.)

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use kura_keys::format::HEADER_SIZE;
use kura_keys::{Cipher, Header, Keyring, ObjectName, ObjectSecrets};
use s3s::{S3Result, s3_error};

/// The name the token is bound to. The key's length comes first: keys may hold NUL, so
/// separators alone would let two (key, upstream ID) pairs share a name.
fn upload_name(key: &str, upstream_id: &str) -> String {
    format!("kura-upload\0{}\0{key}{upstream_id}", key.len())
}

/// The client's upload ID for a new upload.
pub(crate) fn encode(
    keyring: &Keyring,
    bucket: &str,
    key: &str,
    upstream_id: &str,
    secrets: &ObjectSecrets,
    cipher: Cipher,
) -> S3Result<String> {
    let name = upload_name(key, upstream_id);
    let name = ObjectName::new(bucket, &name).map_err(|_| s3_error!(KeyTooLongError))?;
    let header = secrets
        .header(keyring, &name, cipher, 0)
        .map_err(|e| s3_error!(InternalError, "{e}"))?;
    Ok(format!("{upstream_id}.{}", B64.encode(header)))
}

/// Splits a client upload ID into the upstream's ID and the token, if any. IDs from
/// ListMultipartUploads have no token: they can list and abort, not upload parts.
pub(crate) fn upstream_id(client_id: &str) -> &str {
    // A token is exactly one encoded header; a dot-separated piece of an upstream's own ID
    // (AWS IDs have dots) that happens to be long is not one.
    client_id
        .rsplit_once('.')
        .filter(|(_, token)| B64.decode(token).is_ok_and(|b| b.len() == HEADER_SIZE))
        .map_or(client_id, |(up, _)| up)
}

/// Opens a client upload ID: the upstream ID, the object's secrets and cipher.
pub(crate) fn decode(
    keyring: &Keyring,
    bucket: &str,
    key: &str,
    client_id: &str,
) -> S3Result<(String, ObjectSecrets, Cipher)> {
    let no_such = || {
        s3_error!(
            NoSuchUpload,
            "the upload ID is not one this gateway issued for this object"
        )
    };
    let (upstream, token) = client_id.rsplit_once('.').ok_or_else(no_such)?;
    let bytes = B64.decode(token).map_err(|_| no_such())?;
    if bytes.len() != HEADER_SIZE {
        return Err(no_such());
    }
    let name = upload_name(key, upstream);
    let name = ObjectName::new(bucket, &name).map_err(|_| no_such())?;
    let verified = Header::parse(&bytes)
        .and_then(|h| h.verify(keyring, &name))
        .map_err(|e| match e {
            kura_keys::Error::UnknownKeyId(id) => s3_error!(
                InternalError,
                "upload was started under key {id}, which is not in the key file"
            ),
            _ => no_such(),
        })?;
    let cipher = verified.header().cipher();
    let secrets = ObjectSecrets::from_bytes(&verified.secrets().to_bytes());
    Ok((upstream.to_string(), secrets, cipher))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_whole_token_is_split_off() {
        let token = B64.encode([7u8; HEADER_SIZE]);
        assert_eq!(upstream_id(&format!("up.load.{token}")), "up.load");
        // An upstream ID with a long last piece, as from ListMultipartUploads, stays whole.
        let long = format!("abc.{}", "x".repeat(150));
        assert_eq!(upstream_id(&long), long);
        assert_eq!(upstream_id("plain"), "plain");
    }

    #[test]
    fn no_two_pairs_of_key_and_upstream_id_share_a_token_name() {
        // Keys may hold NUL; a separator alone would let ("a\0kura-upload\0b", "c") and
        // ("a", "b\0kura-upload\0c") name the same token.
        let pairs = [
            ("a\0kura-upload\0b", "c"),
            ("a", "b\0kura-upload\0c"),
            ("a", "bc"),
            ("ab", "c"),
            ("", "abc"),
            ("abc", ""),
        ];
        let names: std::collections::HashSet<_> =
            pairs.iter().map(|(k, u)| upload_name(k, u)).collect();
        assert_eq!(names.len(), pairs.len());
    }
}
