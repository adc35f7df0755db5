//! The XML documents the gateway reads whole (CompleteMultipartUpload, DeleteObjects,
//! tagging, Object Lock, versioning): any bytes parse or fail, never panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|xml: &[u8]| kura_gateway::fuzzing::xml_bodies(xml));
