//! Key file text (SPEC 9): parsing any text gives a keyring or a typed error, never a
//! panic, and an error never quotes a value of the file (it may be a key): a key file with
//! a known secret value before the fuzzed text must never show that value.
//!
//! The fuzzer learns the secret's bytes from the comparison below and writes them into
//! its own text, where an error may rightly quote them (a field name, say). So the file
//! is parsed twice, with two secrets of one length: only an error that shows the secret
//! of its own file and not the other's has quoted the file's secret.

#![no_main]

use libfuzzer_sys::fuzz_target;

const SECRETS: [&str; 2] = [
    "c2VjcmV0LXZhbHVlLXRoYXQtbXVzdC1ub3Qtc2hvdw",
    "b3RoZXItdmFsdWUtdGhhdC1tdXN0LW5vdC1zaG93IQ",
];

fn error_with(secret: &str, fuzzed: &str) -> String {
    let text = format!("version = 1\n[[keys]]\nid = \"k\"\nsecret = \"{secret}\"\n{fuzzed}");
    kura_keys::Keyring::from_toml(&text, None)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

fuzz_target!(|fuzzed: &str| {
    let _ = kura_keys::keyfile::is_sealed(fuzzed);
    let _ = kura_keys::Keyring::from_toml(fuzzed, None);
    let errors = SECRETS.map(|s| error_with(s, fuzzed));
    for (mine, other) in [(0, 1), (1, 0)] {
        assert!(
            !(errors[mine].contains(SECRETS[mine]) && !errors[other].contains(SECRETS[mine])),
            "the error quotes the key: {}",
            errors[mine]
        );
    }
});
