/*
 * The pod sandbox's init process: it holds the pod's namespaces open and does nothing else.
 *
 * As PID 1 of the pod's PID namespace it has two duties the kernel gives no one else:
 *  - reap orphans re-parented to it, or they stay zombies for the life of the pod;
 *  - handle its own termination signals, because the kernel drops signals to PID 1 that
 *    have no handler, so without one `kill -TERM` would be ignored and every sandbox stop
 *    would wait for the SIGKILL timeout.
 *
 * Built with `gcc -Os -static` by hack/build-images.sh into the registry.k8s.io/pause test image.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define VERSION "kubelet-rs pause 3.10"

static void on_terminate(int sig)
{
	(void)sig;
	_exit(0);
}

static void on_child(int sig)
{
	int saved_errno = errno;

	(void)sig;
	/* One SIGCHLD may stand for many exits, so drain every waitable child. */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	errno = saved_errno;
}

static int install(int sig, void (*handler)(int), int flags)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	return sigaction(sig, &sa, NULL);
}

static void say(int fd, const char *msg)
{
	size_t len = strlen(msg);

	while (len > 0) {
		ssize_t n = write(fd, msg, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		msg += n;
		len -= (size_t)n;
	}
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		say(STDOUT_FILENO, VERSION "\n");
		return 0;
	}
	if (getpid() != 1)
		say(STDERR_FILENO, "pause: warning: not PID 1, orphans of this pod go elsewhere\n");

	if (install(SIGINT, on_terminate, 0) < 0 || install(SIGTERM, on_terminate, 0) < 0 ||
	    install(SIGCHLD, on_child, SA_NOCLDSTOP | SA_RESTART) < 0) {
		say(STDERR_FILENO, "pause: sigaction failed\n");
		return 1;
	}

	for (;;)
		pause();
	/* not reached: pause() only returns after a handler, and the loop waits again */
	return 42;
}
