//! Which library runs AES-256-GCM on this CPU: aws-lc-rs or ring.
//!
//! Neither is fastest everywhere: on the machines kura was measured on, the AEAD calls alone
//! differ by up to 2x, the format's throughput by 1.3-1.5x (`keys/README.md`, Throughput),
//! and the gateway's CPU per GiB by 15-30 % (`gateway/README.md`). aws-lc has an AVX-512 AES-GCM (VAES and
//! VPCLMULQDQ on 512-bit registers), about 1.5x ring's code where it runs, and seals and
//! opens out of place; but on a CPU with VAES and VPCLMULQDQ and no AVX-512 (AMD Zen 3,
//! Intel client cores) it falls back to its AES-NI code, while ring has a VAES-AVX2
//! implementation that is about twice as fast there. (AMD Zen 4 has AVX-512 and so gets
//! aws-lc; the two were not compared on one.) ChaCha20-Poly1305 always runs on
//! aws-lc-rs: the two measured the same.
//!
//! Both produce the same bytes (the AEAD is the standard one), so the choice never affects
//! what is stored; the unit tests in `cipher.rs` open each backend's output with the other.

use std::sync::OnceLock;

/// The environment variable that overrides the choice for AES-256-GCM: `aws-lc` or `ring`
/// (for A/B measurements; other values are ignored, and [`AesBackend::env_override`] tells
/// callers so they can warn).
pub const AES_BACKEND_ENV: &str = "KURA_AES_BACKEND";

/// A library that implements AES-256-GCM for this crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AesBackend {
    /// aws-lc-rs: AVX-512 on CPUs that have it, AES-NI otherwise, ARMv8 crypto on aarch64.
    AwsLc,
    /// ring: VAES-AVX2 on x86-64 CPUs with VAES and VPCLMULQDQ but no AVX-512.
    Ring,
}

impl AesBackend {
    /// The backend this process uses: [`AES_BACKEND_ENV`] if it names one, else
    /// [`AesBackend::for_cpu`]. Decided once per process.
    #[must_use]
    pub fn active() -> Self {
        static ACTIVE: OnceLock<AesBackend> = OnceLock::new();
        *ACTIVE.get_or_init(|| {
            Self::env_override()
                .ok()
                .flatten()
                .unwrap_or_else(Self::for_cpu)
        })
    }

    /// The faster backend for this CPU.
    #[must_use]
    pub fn for_cpu() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            let vaes = std::arch::is_x86_feature_detected!("vaes")
                && std::arch::is_x86_feature_detected!("vpclmulqdq");
            // aws-lc's condition for its AVX-512 AES-GCM (`crypto_gcm_avx512_enabled`).
            let avx512 = std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512dq")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl");
            if vaes && !avx512 && std::arch::is_x86_feature_detected!("avx2") {
                return Self::Ring;
            }
        }
        Self::AwsLc
    }

    /// What [`AES_BACKEND_ENV`] says: `Ok(None)` if it is unset or empty, `Err(value)` if
    /// it names no backend.
    ///
    /// # Errors
    ///
    /// The variable's value, if it is set to something other than a backend's name.
    pub fn env_override() -> Result<Option<Self>, String> {
        match std::env::var(AES_BACKEND_ENV) {
            Ok(v) if v.is_empty() => Ok(None),
            Ok(v) => Self::from_name(&v).map(Some).ok_or(v),
            Err(_) => Ok(None),
        }
    }

    /// The name used in logs and in [`AES_BACKEND_ENV`].
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::AwsLc => "aws-lc",
            Self::Ring => "ring",
        }
    }

    /// Parses a name as printed by [`AesBackend::name`].
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "aws-lc" => Some(Self::AwsLc),
            "ring" => Some(Self::Ring),
            _ => None,
        }
    }
}
