//! The key file (SPEC 9): TOML text, optionally sealed under a passphrase with Argon2id,
//! and its place on disk: readable by its owner only, never overwritten by a new key file,
//! replaced atomically when it changes (rotation). The CLI and the gateway's embedded
//! default both write key files (and the embedded default's generated credentials) here.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::cipher::{AeadKey, Cipher};
use crate::format::{KEY_SIZE, NONCE_SIZE, label};
use crate::keyring::{KeyEntry, KeyId, Keyring};
use crate::secret::{Kek, Passphrase};
use crate::{Error, Result};

/// Argon2id cost of newly sealed key files: 64 MiB, 3 passes (OWASP's first recommendation).
const M_COST_KIB: u32 = 65_536;
const T_COST: u32 = 3;
const P_COST: u32 = 1;
const KDF_SALT_SIZE: usize = 16;
/// The highest costs a reader accepts, so a hostile key file cannot exhaust memory or time.
const MAX_M_COST_KIB: u32 = 1024 * 1024;
const MAX_T_COST: u32 = 16;
const MAX_P_COST: u32 = 8;

#[derive(Serialize, Deserialize)]
struct FileToml {
    version: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    active: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    keys: Vec<KeyToml>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sealed: Option<SealedToml>,
}

#[derive(Serialize, Deserialize)]
struct KeyToml {
    id: String,
    #[serde(default)]
    created: String,
    secret: String,
}

#[derive(Serialize, Deserialize)]
struct SealedToml {
    kdf: String,
    m_cost_kib: u32,
    t_cost: u32,
    p_cost: u32,
    salt: String,
    nonce: String,
    ciphertext: String,
}

fn bad(msg: impl Into<String>) -> Error {
    Error::KeyFile(msg.into())
}

/// A TOML parse error of `text` as one line: what is wrong and where, without the source
/// line that toml's own message quotes, since that line may hold a secret (a key, or a
/// misspelt `secret_access_key`). For every TOML file that can hold secrets: key files,
/// the gateway's config and credentials, the repository config.
#[must_use]
pub fn describe_toml_error(error: &toml::de::Error, text: &str) -> String {
    let message = without_values(error.message().trim_end());
    let Some(span) = error.span() else {
        return message;
    };
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("{message} (line {line}, column {column})")
}

/// `message` with every value serde quotes in it named by its type only: a type error
/// says `invalid type: string "...", expected u32` of whatever stood there, and a value in
/// the wrong place may be a secret (found by the `keyfile` fuzz target). Field names stay.
fn without_values(message: &str) -> String {
    // serde's `Unexpected` and unknown-variant wording: a string is Debug-quoted (`\"`
    // escaped), the others are in backticks.
    const QUOTED: [(&str, char, &str); 6] = [
        ("string \"", '"', "a string"),
        ("boolean `", '`', "a boolean"),
        ("integer `", '`', "an integer"),
        ("floating point `", '`', "a float"),
        ("character `", '`', "a character"),
        ("unknown variant `", '`', "an unknown variant"),
    ];
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    'scan: while !rest.is_empty() {
        for (open, close, name) in QUOTED {
            if let Some(after) = rest.strip_prefix(open) {
                let mut escaped = false;
                for (i, c) in after.char_indices() {
                    if c == close && !escaped {
                        out.push_str(name);
                        rest = &after[i + c.len_utf8()..];
                        continue 'scan;
                    }
                    escaped = close == '"' && c == '\\' && !escaped;
                }
                // Unterminated: nothing after the opening is kept.
                out.push_str(name);
                return out;
            }
        }
        let c = rest.chars().next().unwrap_or_default();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Parses a key file's TOML, described as [`describe_toml_error`] does when it does not.
fn parse_file(text: &str) -> Result<FileToml> {
    toml::from_str(text).map_err(|e| bad(describe_toml_error(&e, text)))
}

/// Whether this key file text is sealed under a passphrase.
///
/// # Errors
/// [`Error::KeyFile`] if the text is not a key file.
pub fn is_sealed(text: &str) -> Result<bool> {
    Ok(parse_file(text)?.sealed.is_some())
}

impl Keyring {
    /// Parses a key file; `passphrase` is needed only when the file is sealed.
    ///
    /// # Errors
    /// [`Error::KeyFile`] for a malformed file or a sealed file without a passphrase,
    /// [`Error::WrongPassphrase`] when the passphrase does not open it.
    pub fn from_toml(text: &str, passphrase: Option<&Passphrase>) -> Result<Self> {
        let file = parse_file(text)?;
        if file.version != 1 {
            return Err(bad(format!(
                "unsupported key file version {}",
                file.version
            )));
        }
        if let Some(sealed) = file.sealed {
            let passphrase =
                passphrase.ok_or_else(|| bad("the key file is sealed; a passphrase is needed"))?;
            let inner = unseal(&sealed, passphrase)?;
            let inner =
                std::str::from_utf8(&inner).map_err(|_| bad("sealed content is not UTF-8"))?;
            return Self::from_toml(inner, None);
        }
        let active = file
            .active
            .ok_or_else(|| bad("no `active` key"))?
            .parse::<KeyId>()?;
        let mut entries = Vec::with_capacity(file.keys.len());
        for k in file.keys {
            let id: KeyId = k.id.parse()?;
            let secret = Zeroizing::new(k.secret);
            let raw = Zeroizing::new(
                B64.decode(secret.as_bytes())
                    .map_err(|_| bad(format!("key {id}: secret is not base64")))?,
            );
            let bytes: [u8; KEY_SIZE] = raw
                .as_slice()
                .try_into()
                .map_err(|_| bad(format!("key {id}: secret is not 32 bytes")))?;
            entries.push(KeyEntry::new(id, k.created, Kek::from_bytes(bytes)));
        }
        Keyring::new(entries, active)
    }

    /// The unsealed key file text. It holds every secret: write it only where the key file goes.
    ///
    /// # Errors
    /// [`Error::KeyFile`] if serialization fails.
    pub fn to_toml(&self) -> Result<Zeroizing<String>> {
        let file = FileToml {
            version: 1,
            active: Some(self.active().id.to_string()),
            keys: self
                .entries()
                .map(|e| KeyToml {
                    id: e.id.to_string(),
                    created: e.created.clone(),
                    secret: B64.encode(e.kek().expose()),
                })
                .collect(),
            sealed: None,
        };
        let text = Zeroizing::new(toml::to_string(&file).map_err(|e| bad(e.to_string()))?);
        // The serialized structure held base64 copies of the secrets; they drop here unzeroized
        // inside `file`, so scrub them explicitly.
        for mut k in file.keys {
            zeroize::Zeroize::zeroize(&mut k.secret);
        }
        Ok(Zeroizing::new(format!(
            "# kura key file: back it up. Without it the data cannot be decrypted.\n{}",
            *text
        )))
    }

    /// The key file text sealed under `passphrase` with Argon2id and ChaCha20-Poly1305.
    ///
    /// # Errors
    /// [`Error::Random`] if the system generator fails.
    pub fn to_sealed_toml(&self, passphrase: &Passphrase) -> Result<String> {
        let mut salt = [0u8; KDF_SALT_SIZE];
        crate::rand::fill(&mut salt)?;
        let mut nonce = [0u8; NONCE_SIZE];
        crate::rand::fill(&mut nonce)?;
        let key = derive(passphrase, &salt, M_COST_KIB, T_COST, P_COST)?;
        let mut buf = self.to_toml()?.as_bytes().to_vec();
        AeadKey::new(Cipher::ChaCha20Poly1305, &key).seal_append(
            nonce,
            label::KEYFILE,
            &mut buf,
            0,
        );
        let file = FileToml {
            version: 1,
            active: None,
            keys: Vec::new(),
            sealed: Some(SealedToml {
                kdf: "argon2id".into(),
                m_cost_kib: M_COST_KIB,
                t_cost: T_COST,
                p_cost: P_COST,
                salt: B64.encode(salt),
                nonce: B64.encode(nonce),
                ciphertext: B64.encode(&buf),
            }),
        };
        let text = toml::to_string(&file).map_err(|e| bad(e.to_string()))?;
        Ok(format!(
            "# kura key file, sealed with a passphrase: back it up, and the passphrase too.\n{text}"
        ))
    }
}

fn derive(
    passphrase: &Passphrase,
    salt: &[u8],
    m: u32,
    t: u32,
    p: u32,
) -> Result<Zeroizing<[u8; KEY_SIZE]>> {
    let params = argon2::Params::new(m, t, p, Some(KEY_SIZE))
        .map_err(|e| bad(format!("argon2 parameters: {e}")))?;
    let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut key = Zeroizing::new([0u8; KEY_SIZE]);
    argon
        .hash_password_into(passphrase.expose(), salt, key.as_mut())
        .map_err(|e| bad(format!("argon2: {e}")))?;
    Ok(key)
}

fn unseal(sealed: &SealedToml, passphrase: &Passphrase) -> Result<Zeroizing<Vec<u8>>> {
    if sealed.kdf != "argon2id" {
        return Err(bad(format!("unsupported kdf {:?}", sealed.kdf)));
    }
    if sealed.m_cost_kib > MAX_M_COST_KIB
        || sealed.t_cost > MAX_T_COST
        || sealed.p_cost > MAX_P_COST
    {
        return Err(bad(
            "argon2 cost above what a reader accepts (1 GiB, 16 passes, 8 lanes)",
        ));
    }
    let salt = B64
        .decode(&sealed.salt)
        .map_err(|_| bad("salt is not base64"))?;
    let nonce: [u8; NONCE_SIZE] = B64
        .decode(&sealed.nonce)
        .ok()
        .and_then(|n| n.try_into().ok())
        .ok_or_else(|| bad("nonce is not 12 bytes of base64"))?;
    let mut buf = Zeroizing::new(
        B64.decode(&sealed.ciphertext)
            .map_err(|_| bad("ciphertext is not base64"))?,
    );
    let key = derive(
        passphrase,
        &salt,
        sealed.m_cost_kib,
        sealed.t_cost,
        sealed.p_cost,
    )?;
    let len = AeadKey::new(Cipher::ChaCha20Poly1305, &key)
        .open(nonce, label::KEYFILE, &mut buf)
        .map_err(|_| Error::WrongPassphrase)?
        .len();
    buf.truncate(len);
    Ok(buf)
}

/// What [`write_private`] and [`Keyring::save`] do when the file is already there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Existing {
    /// Refuse (`O_EXCL`): writing a new key over an old one would lose every object the
    /// old one sealed.
    Refuse,
    /// Replace it atomically: write a new file beside it, sync it, rename it over the old
    /// one, so that a crash leaves the old file or the new one, never half of either.
    Replace,
}

/// Writes `bytes` to `path` as a file only its owner can read or write (mode 0600 from the
/// moment it exists), synced to disk before this returns.
///
/// # Errors
/// [`Error::Io`] when the file exists and `existing` is [`Existing::Refuse`], when a
/// replacement's temporary file (`PATH.tmp-kura`, left by a crash) exists, or when writing
/// fails.
pub fn write_private(path: &Path, bytes: &[u8], existing: Existing) -> Result<()> {
    let tmp = path.with_extension("tmp-kura");
    let target = match existing {
        Existing::Refuse => path,
        Existing::Replace => tmp.as_path(),
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(target)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    if existing == Existing::Replace {
        std::fs::rename(&tmp, path)?;
    }
    Ok(())
}

impl Keyring {
    /// Writes this keyring as a key file at `path` with [`write_private`]: sealed under
    /// `passphrase` when one is given, plain TOML otherwise.
    ///
    /// # Errors
    /// As [`write_private`], and as [`Keyring::to_sealed_toml`].
    pub fn save(
        &self,
        path: &Path,
        passphrase: Option<&Passphrase>,
        existing: Existing,
    ) -> Result<()> {
        let text = match passphrase {
            Some(p) => Zeroizing::new(self.to_sealed_toml(p)?),
            None => self.to_toml()?,
        };
        write_private(path, text.as_bytes(), existing)
    }
}

/// Now, in RFC 3339 to the second: the `created` time that key files record for a key.
#[must_use]
pub fn timestamp_now() -> String {
    time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap_or_else(|_| time::OffsetDateTime::now_utc())
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_that_does_not_parse_is_described_without_quoting_its_lines() {
        let secret = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I";
        let text =
            format!("version = 1\nactive = \"k1\"\n[[keys]]\nid = \"k1\"\nsecret = \"{secret}\n");
        let err = Keyring::from_toml(&text, None).err().unwrap().to_string();
        assert!(!err.contains(secret), "{err}");
        assert!(err.contains("line 5"), "says where: {err}");
    }

    /// Found by the `keyfile` fuzz target (CI, 2026-12-06): serde's type errors quote the
    /// string they were given, and a value put in the wrong place may be a secret.
    #[test]
    fn a_value_of_the_wrong_type_is_named_by_its_type_not_quoted() {
        let secret = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I";
        let text = format!("version = 1\n[sealed]\nm_cost_kib = \"{secret}\"\n");
        let err = Keyring::from_toml(&text, None).err().unwrap().to_string();
        assert!(!err.contains(secret), "{err}");
        assert!(
            err.contains("invalid type: a string, expected u32") && err.contains("line 3"),
            "says what and where: {err}"
        );
        let text = "version = 1\nactive = 'k'\n[[keys]]\nid = 'k'\nsecret = 'c2Vj'\ncreated = 'x'\n[sealed]\nkdf = 'ab'\nm_cost_kib = 'x'";
        let err = Keyring::from_toml(text, None).err().unwrap().to_string();
        assert!(!err.contains("'x'") && !err.contains("\"x\""), "{err}");
    }
}
