# kubelet-rs's runtime-default AppArmor profile: what a container that asks for no profile,
# or for RuntimeDefault, runs under on an AppArmor host. It plays the part of containerd's
# cri-containerd.apparmor.d: ordinary work is allowed, and the host's kernel knobs,
# firmware, security policy and raw memory are out of reach, as are mounts and tracing of
# processes outside the profile. The agent loads it with `apparmor_parser -Kr` when the
# kernel does not have it yet.

#include <tunables/global>

profile kubelet-rs-default flags=(attach_disconnected,mediate_deleted) {
  #include <abstractions/base>

  # What a container ordinarily does.
  network,
  capability,
  file,
  umount,

  # Signals only between the container's own processes, and from the runtime (unconfined).
  signal (send,receive) peer=kubelet-rs-default,
  signal (receive) peer=unconfined,

  # Tracing stays inside the profile.
  ptrace (trace,read,tracedby,readby) peer=kubelet-rs-default,

  # No new mounts: the runtime made the container's.
  deny mount,

  # /proc: its top-level files and other processes' entries are read-only; of /proc/sys,
  # only kernel.shm* may be written (the IPC namespace's own); the trigger and raw memory
  # files are closed altogether.
  deny @{PROC}/* w,
  deny @{PROC}/{[^1-9],[^1-9][^0-9],[^1-9s][^0-9y][^0-9s],[^1-9][^0-9][^0-9][^0-9/]*}/** w,
  deny @{PROC}/sys/[^k]** w,
  deny @{PROC}/sys/kernel/{?,??,[^s][^h][^m]**} w,
  deny @{PROC}/sysrq-trigger rwklx,
  deny @{PROC}/kcore rwklx,

  # /sys: nothing written but the cgroup file system; firmware and the security file
  # system (AppArmor's own policy among it) not even read.
  deny /sys/[^f]*/** wklx,
  deny /sys/f[^s]*/** wklx,
  deny /sys/fs/[^c]*/** wklx,
  deny /sys/fs/c[^g]*/** wklx,
  deny /sys/fs/cg[^r]*/** wklx,
  deny /sys/firmware/** rwklx,
  deny /sys/kernel/security/** rwklx,
}
