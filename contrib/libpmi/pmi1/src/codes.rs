//! The PMI-1 return codes and booleans, with the values every `pmi.h` uses.

use std::os::raw::c_int;

/// The call succeeded.
pub const PMI_SUCCESS: c_int = 0;
/// The call failed.
pub const PMI_FAIL: c_int = -1;
/// PMI is not initialised.
pub const PMI_ERR_INIT: c_int = 1;
/// Out of memory.
pub const PMI_ERR_NOMEM: c_int = 2;
/// An argument is invalid (a null pointer, say).
pub const PMI_ERR_INVALID_ARG: c_int = 3;
/// The key is invalid.
pub const PMI_ERR_INVALID_KEY: c_int = 4;
/// The key is too long.
pub const PMI_ERR_INVALID_KEY_LENGTH: c_int = 5;
/// The value is invalid.
pub const PMI_ERR_INVALID_VAL: c_int = 6;
/// The value is too long.
pub const PMI_ERR_INVALID_VAL_LENGTH: c_int = 7;
/// A length argument is invalid (a buffer too small).
pub const PMI_ERR_INVALID_LENGTH: c_int = 8;
/// The number of arguments is invalid.
pub const PMI_ERR_INVALID_NUM_ARGS: c_int = 9;
/// The arguments are invalid.
pub const PMI_ERR_INVALID_ARGS: c_int = 10;
/// The count of parsed arguments is invalid.
pub const PMI_ERR_INVALID_NUM_PARSED: c_int = 11;
/// The key-value pointer is invalid.
pub const PMI_ERR_INVALID_KEYVALP: c_int = 12;
/// A size argument is invalid.
pub const PMI_ERR_INVALID_SIZE: c_int = 13;
/// `PMI_BOOL` true.
pub const PMI_TRUE: c_int = 1;
/// `PMI_BOOL` false.
pub const PMI_FALSE: c_int = 0;
