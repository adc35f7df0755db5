//! Sealed user metadata (SPEC 7): the client's `x-amz-meta-*` pairs, sealed into one
//! metadata entry under the object's keys on the way up and opened on the way down, beside
//! the header copy that lets a HEAD open them without reading the body.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use kura_keys::format::HEADER_SIZE;
use kura_keys::{Cipher, Header, ObjectName, ObjectSecrets, VerifiedHeader};
use s3s::dto::Metadata;
use s3s::{S3Error, S3Result, s3_error};

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
            .seal_metadata(cipher, header, &pairs)
            .map_err(|e| s3_error!(InvalidArgument, "metadata: {e}"))?;
        out.insert(META_SEALED.into(), sealed);
    }
    out.insert(META_KEY.into(), B64.encode(header));
    Ok(out)
}

fn is_reserved(name: &str) -> bool {
    name.eq_ignore_ascii_case(META_SEALED) || name.eq_ignore_ascii_case(META_KEY)
}

/// The header copy in an object's metadata, verified for its name, with its bytes (the
/// sealed metadata is bound to them).
pub(crate) struct MetadataHeader {
    pub(crate) verified: VerifiedHeader,
    pub(crate) bytes: [u8; HEADER_SIZE],
}

/// Verifies the header copy in an object's metadata, if there is one.
pub(crate) fn metadata_header(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    meta: Option<&Metadata>,
) -> S3Result<Option<MetadataHeader>> {
    let Some(b64) = meta.and_then(|m| m.get(META_KEY)) else {
        return Ok(None);
    };
    let damaged = || s3_error!(InternalError, "stored object metadata is damaged");
    let bytes: [u8; HEADER_SIZE] = B64
        .decode(b64)
        .map_err(|_| damaged())?
        .try_into()
        .map_err(|_| damaged())?;
    let name = ObjectName::new(bucket, key).map_err(keys_error)?;
    let verified = Header::parse(&bytes)
        .and_then(|h| h.verify(&gw.keys(), &name))
        .map_err(keys_error)?;
    Ok(Some(MetadataHeader { verified, bytes }))
}

/// The error for an object whose body is kura's but whose metadata is not what kura
/// stored with it: the header copy is missing, or wraps another data key.
fn metadata_replaced() -> S3Error {
    keys_error(kura_keys::Error::TamperedHeader)
}

/// The user metadata of an object whose body header has not been read (HEAD). The
/// body's header is read (once per ETag, then the gateway's cache) to tell a kura object
/// from another writer's. A kura body's metadata is opened as [`open_metadata_of`] does:
/// its header copy must wrap the body's data key, or it is an older version's or another
/// object's. Another writer's is shown as stored, unless it carries a header copy (kura's
/// metadata moved beside a body that is not kura's). A kura body that does not open here
/// is an error, not another writer's: its metadata in the clear is a bucket writer's.
pub(crate) async fn open_metadata(
    gw: &Gateway,
    (bucket, key, version): (&str, &str, Option<&str>),
    etag: Option<&str>,
    meta: Option<Metadata>,
) -> S3Result<Option<Metadata>> {
    use crate::object::{Seen, changed_while_read, is_precondition_failed};
    let seen = match crate::object::locate_unless_foreign(gw, (bucket, key, version), etag, etag)
        .await
    {
        Ok(seen) => seen,
        Err(e) if etag.is_some() && is_precondition_failed(&e) => return Err(changed_while_read()),
        // An object in an archive storage class (Glacier, Deep Archive) serves no byte until
        // it is restored, but its HEAD is what tells a client so: its metadata is opened
        // with the header copy alone, as HEADs did before they read the body's header,
        // and only the check against another version's is left out.
        Err(e) if *e.code() == s3s::S3ErrorCode::InvalidObjectState => {
            return match metadata_header(gw, bucket, key, meta.as_ref())? {
                Some(header) => open_sealed(&header, meta.as_ref()),
                None => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    match seen {
        Seen::Kura(located) => {
            open_metadata_of(gw, (bucket, key), meta.as_ref(), &located.commitment)
        }
        Seen::Foreign => match metadata_header(gw, bucket, key, meta.as_ref())? {
            Some(_) => Err(metadata_replaced()),
            None => Ok(plain(meta)),
        },
        Seen::Unverified(e) => Err(e),
    }
}

/// The user metadata of an object whose body header verified and has `commitment`: the
/// metadata's header copy must be there and wrap the same data key (SPEC 7), or the
/// metadata was removed, or swapped in from another object or another version of this
/// one. Values stored in the clear beside a kura body are never shown.
pub(crate) fn open_metadata_of(
    gw: &Gateway,
    (bucket, key): (&str, &str),
    meta: Option<&Metadata>,
    commitment: &[u8; kura_keys::format::KEY_SIZE],
) -> S3Result<Option<Metadata>> {
    let header = metadata_header(gw, bucket, key, meta)?.ok_or_else(metadata_replaced)?;
    if header.verified.secrets().commitment() != *commitment {
        return Err(metadata_replaced());
    }
    open_sealed(&header, meta)
}

/// The sealed user metadata in `meta`, opened with its verified header copy; the gateway's
/// own entries, and anything stored in the clear beside them, are not shown.
fn open_sealed(header: &MetadataHeader, meta: Option<&Metadata>) -> S3Result<Option<Metadata>> {
    let Some(sealed) = meta.and_then(|m| m.get(META_SEALED)) else {
        return Ok(None);
    };
    let verified = &header.verified;
    let pairs = verified
        .secrets()
        .open_metadata(verified.header().cipher(), &header.bytes, sealed)
        .map_err(keys_error)?;
    Ok(Some(pairs.into_iter().collect()))
}

/// Another writer's metadata, as stored (without the gateway's own names).
fn plain(meta: Option<Metadata>) -> Option<Metadata> {
    let rest: Metadata = meta?.into_iter().filter(|(k, _)| !is_reserved(k)).collect();
    (!rest.is_empty()).then_some(rest)
}
