//! Integration tests for the coolplane workspace (see tests/tests/).
