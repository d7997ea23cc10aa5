//! SOCKS5 with names resolved by warden. (Issue 18: being written.)
