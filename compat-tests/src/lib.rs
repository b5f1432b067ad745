//! Helpers shared by the compatibility tests: finding peers, building C programs.
