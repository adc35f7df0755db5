//! The `kura` binary end to end: one test binary, a module per command family.

mod crash;
mod faulty_repo;
mod gateway;
mod keys;
mod repair;
mod repo;
