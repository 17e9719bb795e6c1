//! A live V4L2 device as a participant (filled in by the V4L2 work).
