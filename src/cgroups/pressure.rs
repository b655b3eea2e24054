//! Pressure stall information (PSI) of a v2 cgroup: `cpu.pressure`, `memory.pressure`,
//! `io.pressure`, read as runc's cgroup reader (what cAdvisor uses) reads them. A file the
//! kernel does not give (PSI not built in, or off for the cgroup: `cgroup.pressure` 0) reads
//! as zeros, as cAdvisor reports it; a file that does not parse is an error naming it.
//! cgroup v1 has no per-cgroup pressure, so nothing is read there.

use std::path::Path;

use super::error::{CgroupError, Result};

/// One line of a pressure file. `total` is the kernel's cumulative stall time in
/// microseconds, passed on as it is (cAdvisor and the Summary API do too).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PsiData {
    pub total: u64,
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
}

/// A pressure file: `some` (at least one task stalled) and `full` (all stalled).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Psi {
    pub some: PsiData,
    pub full: PsiData,
}

/// The three pressure files of one cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pressure {
    pub cpu: Psi,
    pub memory: Psi,
    pub io: Psi,
}

/// Parses a pressure file's text (`some avg10=.. avg60=.. avg300=.. total=..`, then `full`).
/// Lines of other kinds are skipped, as runc skips them.
pub fn parse(path: &Path, text: &str) -> Result<Psi> {
    let mut psi = Psi::default();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let slot = match fields.next() {
            Some("some") => &mut psi.some,
            Some("full") => &mut psi.full,
            _ => continue,
        };
        for field in fields {
            let (key, value) = field
                .split_once('=')
                .ok_or_else(|| CgroupError::parse(path, format!("invalid psi data: {field:?}")))?;
            let float = || {
                value.parse::<f64>().map_err(|_| {
                    CgroupError::parse(path, format!("invalid {key} PSI value: {value:?}"))
                })
            };
            match key {
                "avg10" => slot.avg10 = float()?,
                "avg60" => slot.avg60 = float()?,
                "avg300" => slot.avg300 = float()?,
                "total" => {
                    slot.total = value.parse().map_err(|_| {
                        CgroupError::parse(path, format!("invalid total PSI value: {value:?}"))
                    })?
                }
                _ => {}
            }
        }
    }
    Ok(psi)
}

/// Reads one pressure file; absent or unsupported (EOPNOTSUPP on read, as some kernels
/// answer without `psi=1`) is zeros.
fn read_file(path: &Path) -> Result<Psi> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(path, &text),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::EOPNOTSUPP) =>
        {
            Ok(Psi::default())
        }
        Err(e) => Err(CgroupError::read(path, e)),
    }
}

impl super::Cgroups {
    /// The cgroup's pressure on a v2 host; None on v1, which keeps none per cgroup.
    pub fn pressure(&self, cgroup: &str) -> Result<Option<Pressure>> {
        match self.version() {
            super::Version::V1 => Ok(None),
            super::Version::V2 => read(&self.cpu_dir(cgroup)).map(Some),
        }
    }
}

/// The pressure of the v2 cgroup at `dir`.
pub fn read(dir: &Path) -> Result<Pressure> {
    Ok(Pressure {
        cpu: read_file(&dir.join("cpu.pressure"))?,
        memory: read_file(&dir.join("memory.pressure"))?,
        io: read_file(&dir.join("io.pressure"))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_format_parses_and_bad_values_name_the_file() {
        let p = Path::new("/x/cpu.pressure");
        let psi = parse(
            p,
            "some avg10=97.47 avg60=77.21 avg300=32.64 total=1473329127\n\
             full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        )
        .unwrap();
        assert_eq!(
            psi.some,
            PsiData {
                total: 1473329127,
                avg10: 97.47,
                avg60: 77.21,
                avg300: 32.64
            }
        );
        assert_eq!(psi.full, PsiData::default());
        // Kernels before 5.13 have no `full` line in cpu.pressure.
        let only_some = parse(p, "some avg10=1.00 avg60=2.00 avg300=3.00 total=4\n").unwrap();
        assert_eq!(only_some.full, PsiData::default());
        let e = parse(p, "some avg10=x avg60=0 avg300=0 total=0\n").unwrap_err();
        assert!(e.to_string().contains("/x/cpu.pressure"), "{e}");
        assert!(e.to_string().contains("avg10"), "{e}");
        assert!(parse(p, "full total\n").is_err());
    }

    #[test]
    fn a_cgroup_without_pressure_files_reads_zeros() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), Pressure::default());
    }
}
