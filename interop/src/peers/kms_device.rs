//! A live KMS device as a participant (filled in by the KMS work).
