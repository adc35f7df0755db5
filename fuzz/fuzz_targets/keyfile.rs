//! Key file text (SPEC 9): parsing any text gives a keyring or a typed error, never a
//! panic, and an error never quotes a value of the file (it may be a key): a key file with
//! a known secret value before the fuzzed text must never show that value.

#![no_main]

use libfuzzer_sys::fuzz_target;

const SECRET: &str = "c2VjcmV0LXZhbHVlLXRoYXQtbXVzdC1ub3Qtc2hvdw";

fuzz_target!(|fuzzed: &str| {
    let _ = kura_keys::keyfile::is_sealed(fuzzed);
    let _ = kura_keys::Keyring::from_toml(fuzzed, None);
    let text = format!("version = 1\n[[keys]]\nid = \"k\"\nsecret = \"{SECRET}\"\n{fuzzed}");
    if let Err(e) = kura_keys::Keyring::from_toml(&text, None) {
        assert!(
            !e.to_string().contains(SECRET),
            "the error quotes the key: {e}"
        );
    }
});
