//! `.ovsschema` parsing: filled in next.
