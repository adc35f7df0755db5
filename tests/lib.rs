//! kura's end-to-end tests: the `kura` binary run as processes, the way an operator runs
//! it, across every crate (keys, gateway, repository, CLI). The tests are in `e2e/`, one
//! module per command family; what they share comes from `kura-testkit`. This library is
//! empty: cargo needs a target for a package that holds only tests.
