//! The provider's log lines. They go to the application's standard error,
//! which the application owns: it may have closed it, pointed it at a full
//! disk or at a pipe nobody reads (with SIGPIPE ignored). `eprintln!`
//! panics when a write fails; a log line must never take a verb, the
//! progress thread or the application down, so a line that cannot be
//! written is dropped.

use std::fmt::Arguments;
use std::io::Write;

/// Writes one line to standard error, as `eprintln!` does, dropping it if
/// it cannot be written.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say::line(&mut ::std::io::stderr(), ::std::format_args!($($arg)*))
    };
}

/// Writes `args` and a newline to `out`; a failed write is ignored.
pub fn line(out: &mut impl Write, args: Arguments<'_>) {
    let _ = writeln!(out, "{args}");
}

#[cfg(test)]
mod tests {
    use std::io::{self, Write};

    /// Standard error on a full disk, or a pipe whose reader is gone.
    struct Broken;

    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from_raw_os_error(28)) // ENOSPC
        }
        fn flush(&mut self) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(32)) // EPIPE
        }
    }

    #[test]
    fn a_line_that_cannot_be_written_is_dropped() {
        super::line(&mut Broken, format_args!("softverbs: {}", "lost"));
        let mut out = Vec::new();
        super::line(&mut out, format_args!("softverbs: {}", 1));
        assert_eq!(out, b"softverbs: 1\n");
    }
}
