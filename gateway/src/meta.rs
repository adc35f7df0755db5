//! Sealed user metadata (SPEC 7): the client's `x-amz-meta-*` pairs, sealed into one
//! metadata entry under the object's keys on the way up and opened on the way down, beside
//! the header copy that lets a HEAD open them without reading the body.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use kura_keys::format::HEADER_SIZE;
use kura_keys::{Cipher, Header, ObjectName, ObjectSecrets, VerifiedHeader};
use s3s::dto::Metadata;
use s3s::{S3Result, s3_error};

use crate::error::keys_error;
use crate::gateway::Gateway;

/// Metadata names (after `x-amz-meta-`) the gateway owns (SPEC 7).
pub(crate) const META_SEALED: &str = kura_keys::SEALED_METADATA_NAME;
pub(crate) const META_KEY: &str = "kura-key";

/// Seals user metadata for an object with `secrets`, adding the header copy that lets a
/// HEAD open it without reading the body. `cipher` must be the one `header` names: readers
/// open the metadata with the header copy's cipher, and a copy keeps its source's cipher
/// whatever the gateway now seals new objects with.
pub(crate) fn seal_metadata(
    secrets: &ObjectSecrets,
    cipher: Cipher,
    header: &[u8; HEADER_SIZE],
    user: Option<Metadata>,
) -> S3Result<Metadata> {
    let mut out = Metadata::new();
    let pairs: Vec<(String, String)> = user
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !is_reserved(k))
        .collect();
    if !pairs.is_empty() {
        let sealed = secrets
            .seal_metadata(cipher, &pairs)
            .map_err(|e| s3_error!(InvalidArgument, "metadata: {e}"))?;
        out.insert(META_SEALED.into(), sealed);
    }
    out.insert(META_KEY.into(), B64.encode(header));
    Ok(out)
}

fn is_reserved(name: &str) -> bool {
    name.eq_ignore_ascii_case(META_SEALED) || name.eq_ignore_ascii_case(META_KEY)
}

/// Verifies the header copy in an object's metadata.
pub(crate) fn metadata_header(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    meta: Option<&Metadata>,
) -> S3Result<Option<VerifiedHeader>> {
    let Some(b64) = meta.and_then(|m| m.get(META_KEY)) else {
        return Ok(None);
    };
    let bytes = B64
        .decode(b64)
        .map_err(|_| s3_error!(InternalError, "stored object metadata is damaged"))?;
    let name = ObjectName::new(bucket, key).map_err(keys_error)?;
    Header::parse(&bytes)
        .and_then(|h| h.verify(&gw.keyring, &name))
        .map(Some)
        .map_err(keys_error)
}

/// The user metadata of an object, opened; the gateway's own entries removed.
pub(crate) fn open_metadata(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    meta: Option<Metadata>,
) -> S3Result<Option<Metadata>> {
    let sealed = meta.as_ref().is_some_and(|m| m.contains_key(META_SEALED));
    let verified = if sealed {
        metadata_header(gw, bucket, key, meta.as_ref())?
    } else {
        None
    };
    open_metadata_with(verified.as_ref(), meta)
}

/// [`open_metadata`] for a read whose body belongs to the object with `commitment`: the
/// metadata's header copy must wrap the same data key (SPEC 7), or it was swapped in from
/// another object (or another version of this one).
pub(crate) fn open_metadata_of(
    gw: &Gateway,
    (bucket, key): (&str, &str),
    meta: Option<Metadata>,
    commitment: &[u8; kura_keys::format::KEY_SIZE],
) -> S3Result<Option<Metadata>> {
    let meta_header = metadata_header(gw, bucket, key, meta.as_ref())?;
    if meta_header
        .as_ref()
        .is_some_and(|m| m.secrets().commitment() != *commitment)
    {
        return Err(s3_error!(
            InternalError,
            "the stored object's metadata belongs to another object"
        ));
    }
    open_metadata_with(meta_header.as_ref(), meta)
}

/// [`open_metadata`] with the metadata's header copy already verified (by
/// [`metadata_header`]), so that a caller that checked it need not verify it again.
pub(crate) fn open_metadata_with(
    verified: Option<&VerifiedHeader>,
    meta: Option<Metadata>,
) -> S3Result<Option<Metadata>> {
    let Some(meta) = meta else { return Ok(None) };
    let Some(sealed) = meta.get(META_SEALED) else {
        let rest: Metadata = meta.into_iter().filter(|(k, _)| !is_reserved(k)).collect();
        return Ok((!rest.is_empty()).then_some(rest));
    };
    let verified = verified
        .ok_or_else(|| s3_error!(InternalError, "sealed metadata without its key header"))?;
    let pairs = verified
        .secrets()
        .open_metadata(verified.header().cipher(), sealed)
        .map_err(keys_error)?;
    Ok(Some(pairs.into_iter().collect()))
}
