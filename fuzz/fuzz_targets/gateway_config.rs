//! The gateway's config file: any text parses or fails with a description, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| kura_gateway::fuzzing::config(text));
