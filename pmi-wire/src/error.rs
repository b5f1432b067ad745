//! The one error type for malformed wire input.

use thiserror::Error;

/// Why a message could not be parsed. Every malformed input maps to one of these; no input
/// makes a parser panic.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// A PMI-1 line, or a multi-line spawn message, grew past the accepted limit without ending.
    #[error("message longer than {max} bytes")]
    TooLong {
        /// The limit that was exceeded.
        max: usize,
    },
    /// The message does not start with `cmd=` (or `mcmd=` for PMI-1 spawn).
    #[error("message does not start with cmd=: {0:?}")]
    NoCommand(String),
    /// The command name is not one this protocol knows.
    #[error("unknown command `{0}`")]
    UnknownCommand(String),
    /// A field the command needs is absent.
    #[error("`{cmd}` lacks the field `{field}`")]
    MissingField {
        /// The command.
        cmd: String,
        /// The missing field.
        field: String,
    },
    /// A field that must be a number (or a boolean) is not one.
    #[error("`{cmd}`: field `{field}` has the bad value {value:?}")]
    BadValue {
        /// The command.
        cmd: String,
        /// The field.
        field: String,
        /// What was there instead.
        value: String,
    },
    /// A token or a pair is not of the form `key=value`.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// The PMI-2 length prefix is not a decimal number.
    #[error("bad PMI-2 length prefix {0:?}")]
    BadLength(String),
    /// The message is not valid UTF-8.
    #[error("message is not valid UTF-8")]
    NotUtf8,
}

impl WireError {
    /// True when the stream can no longer be trusted to be in step (a framing error), as
    /// opposed to one bad message that the decoder skipped.
    pub fn is_fatal(&self) -> bool {
        matches!(self, WireError::TooLong { .. } | WireError::BadLength(_))
    }
}

pub(crate) fn missing(cmd: &str, field: &str) -> WireError {
    WireError::MissingField {
        cmd: cmd.to_string(),
        field: field.to_string(),
    }
}

pub(crate) fn bad(cmd: &str, field: &str, value: &str) -> WireError {
    WireError::BadValue {
        cmd: cmd.to_string(),
        field: field.to_string(),
        value: value.chars().take(64).collect(),
    }
}
