//! Parsers for the /proc file formats the collector reads (cgroup files are the cgroups
//! layer's: `cgroups::files`). They take the text, so tests feed them fixtures and the
//! collector reads a configurable /proc root; `read_string` adds the path to every error.
//! The formats go through procfs's parsers (from text, so the root can be a fixture).

use std::path::Path;

use procfs::{FromBufRead, FromBufReadSI, FromRead};

use super::error::{Result, StatsError};

fn procfs_error(path: &Path, e: procfs::ProcError) -> StatsError {
    StatsError::parse(path, e.to_string())
}

pub fn read_string(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| StatsError::read(path, e))
}

/// A /proc file holding one unsigned number (`sys/kernel/pid_max`, ...).
pub fn read_u64(path: &Path) -> Result<u64> {
    let text = read_string(path)?;
    text.trim()
        .parse()
        .map_err(|_| StatsError::parse(path, format!("expected a number, found {:?}", text.trim())))
}

/// MemTotal of /proc/meminfo, in bytes (the file says kB and means KiB).
pub fn parse_mem_total(path: &Path, text: &str) -> Result<u64> {
    procfs::Meminfo::from_buf_read(text.as_bytes())
        .map(|m| m.mem_total)
        .map_err(|e| procfs_error(path, e))
}

/// Counters of one interface from a `net/dev` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceCounters {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// `/proc/<pid>/net/dev`: two header lines, then `name: 8 receive and 8 transmit columns`.
/// The name is split at the colon because long counters touch it (`eth0:137410592`).
/// Hand-parsed rather than through procfs, whose parser returns a map: the kernel's order of
/// the interfaces is the order cAdvisor, and so the Summary API, lists them in.
pub fn parse_net_dev(path: &Path, text: &str) -> Result<Vec<InterfaceCounters>> {
    let mut out = Vec::new();
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let cols: Vec<u64> = rest
            .split_whitespace()
            .map(|c| c.parse::<u64>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| StatsError::parse(path, format!("bad counters in line {line:?}")))?;
        if cols.len() < 16 {
            return Err(StatsError::parse(
                path,
                format!(
                    "expected 16 counters, found {} in line {line:?}",
                    cols.len()
                ),
            ));
        }
        out.push(InterfaceCounters {
            name: name.trim().to_string(),
            rx_bytes: cols[0],
            rx_packets: cols[1],
            rx_errors: cols[2],
            rx_dropped: cols[3],
            tx_bytes: cols[8],
            tx_packets: cols[9],
            tx_errors: cols[10],
            tx_dropped: cols[11],
        });
    }
    Ok(out)
}

/// The fourth field of /proc/loadavg is `running/total`; upstream reports the total tasks
/// (threads included), which sysinfo(2) would truncate past 65535.
pub fn parse_loadavg_tasks(path: &Path, text: &str) -> Result<u64> {
    procfs::LoadAverage::from_read(text.as_bytes())
        .map(|l| u64::from(l.max))
        .map_err(|e| procfs_error(path, e))
}

/// `btime` of /proc/stat: boot time in seconds since the epoch.
pub fn parse_btime(path: &Path, text: &str) -> Result<i64> {
    let stats = procfs::KernelStats::from_buf_read(text.as_bytes(), procfs::current_system_info())
        .map_err(|e| procfs_error(path, e))?;
    i64::try_from(stats.btime).map_err(|_| StatsError::parse(path, "btime out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(rel: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("src/stats/testdata")
            .join(rel)
    }

    #[test]
    fn meminfo_is_in_bytes() {
        let p = fixture("proc/meminfo");
        assert_eq!(
            parse_mem_total(&p, &read_string(&p).unwrap()).unwrap(),
            24683584 * 1024
        );
        let err = parse_mem_total(&p, "MemFree: 1 kB\n").unwrap_err();
        assert!(err.to_string().contains("proc/meminfo"), "{err}");
    }

    #[test]
    fn net_dev_of_host_and_pod() {
        let p = fixture("proc/1/net/dev");
        let ifs = parse_net_dev(&p, &read_string(&p).unwrap()).unwrap();
        let names: Vec<_> = ifs.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            ["lo", "ifb0", "ifb1", "eth0", "kubers0", "veth1e4bfee4"]
        );
        let eth0 = &ifs[3];
        assert_eq!((eth0.rx_bytes, eth0.tx_bytes), (137410592, 311244));

        let p = fixture("proc/7644/net/dev");
        let ifs = parse_net_dev(&p, &read_string(&p).unwrap()).unwrap();
        assert_eq!(
            ifs[1],
            InterfaceCounters {
                name: "eth0".into(),
                rx_bytes: 1048576,
                rx_packets: 812,
                rx_errors: 3,
                rx_dropped: 0,
                tx_bytes: 524288,
                tx_packets: 401,
                tx_errors: 1,
                tx_dropped: 0,
            }
        );
    }

    #[test]
    fn net_dev_counter_touching_the_colon() {
        let text = "h1\nh2\n  eth0:137410592    5236    0    0    0     0          0         0   311244    3474    7    0    0     0       0          0\n";
        let ifs = parse_net_dev(Path::new("x"), text).unwrap();
        assert_eq!(ifs[0].rx_bytes, 137410592);
        assert_eq!(ifs[0].tx_errors, 7);
        assert_eq!((ifs[0].rx_packets, ifs[0].tx_packets), (5236, 3474));
        let bad = "h1\nh2\n eth0: 1 2 3\n";
        let err = parse_net_dev(Path::new("/proc/9/net/dev"), bad).unwrap_err();
        assert!(err.to_string().contains("/proc/9/net/dev"), "{err}");
    }

    #[test]
    fn loadavg_btime_and_procs() {
        let p = fixture("proc/loadavg");
        assert!(parse_loadavg_tasks(&p, &read_string(&p).unwrap()).unwrap() > 0);
        assert_eq!(
            parse_loadavg_tasks(&p, "0.91 1.11 1.34 1/131 7376").unwrap(),
            131
        );
        assert!(parse_loadavg_tasks(&p, "0.91").is_err());
        let p = fixture("proc/stat");
        assert_eq!(
            parse_btime(&p, &read_string(&p).unwrap()).unwrap(),
            1796215659
        );
    }
}
