//! Shared helpers of the baseline programs (`udp-pingpong`, `memcpy-bw`)
//! that `make bench` runs next to perftest over softverbs: argument
//! parsing and percentiles. The programs themselves are in `src/bin/`.

use std::collections::HashMap;

/// `--name value` pairs and bare `--flag`s, in any order. Anything else is
/// an error naming the offending word.
#[derive(Debug, Default)]
pub struct Args {
    values: HashMap<String, String>,
}

impl Args {
    /// Parses `args` (without the program name). Flags in `bare` take no
    /// value.
    pub fn parse(args: impl IntoIterator<Item = String>, bare: &[&str]) -> Result<Args, String> {
        let mut values = HashMap::new();
        let mut it = args.into_iter();
        while let Some(word) = it.next() {
            let Some(name) = word.strip_prefix("--") else {
                return Err(format!("unexpected argument {word:?}"));
            };
            let value = if bare.contains(&name) {
                String::new()
            } else {
                it.next().ok_or(format!("--{name} needs a value"))?
            };
            values.insert(name.to_string(), value);
        }
        Ok(Args { values })
    }

    /// The value of `--name` as a number, `default` when absent.
    pub fn num(&self, name: &str, default: u64) -> Result<u64, String> {
        match self.values.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{name}: {v:?} is not a number")),
        }
    }

    /// The value of `--name`, if given.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// Whether the bare flag `--name` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }
}

/// The `p`-th percentile (0..=100) of `sorted`, which must be sorted and
/// non-empty: the nearest-rank value.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_values_and_flags() {
        let a = Args::parse(words("--size 64 --busy --iters 10"), &["busy"]).unwrap();
        assert_eq!(a.num("size", 2).unwrap(), 64);
        assert_eq!(a.num("warmup", 7).unwrap(), 7);
        assert!(a.flag("busy"));
        assert!(Args::parse(words("size"), &[]).is_err());
        assert!(Args::parse(words("--size"), &[]).is_err());
        assert!(a.num("size", 0).is_ok());
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&v, 0.0), 1);
        assert_eq!(percentile(&[5], 50.0), 5);
    }
}
