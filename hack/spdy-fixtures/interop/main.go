// Command interop drives an SPDY exec and port-forward server with client-go's own SPDY
// executor and port forwarder, the code the apiserver's stream translator and tunnel run
// against the kubelet. It was used by hand against the SPDY module served over plain HTTP
// (a test harness answering /exec with a fake process that upper-cases its stdin, writes
// "to stderr" and exits 3, and /portForward with port 8080 reaching an upper-casing echo
// server and every other port refused):
//
//	go run . http://127.0.0.1:18555
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/util/exec"
	"k8s.io/klog/v2"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: interop <base url>")
	}
	base := os.Args[1]
	// The forwarder reports a port's error through klog (runtime.HandleError).
	var klogOut syncBuffer
	klog.LogToStderr(false)
	klog.SetOutput(&klogOut)
	cfg := &rest.Config{Host: base}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	failed := false
	check := func(ok bool, format string, args ...any) {
		status := "ok  "
		if !ok {
			status = "FAIL"
			failed = true
		}
		fmt.Printf("%s %s\n", status, fmt.Sprintf(format, args...))
	}

	// exec with stdin, stdout and stderr; 200 KiB of stdin is well past the 64 KiB window.
	u, _ := url.Parse(base + "/exec/ns/pod/c?command=fake&error=1&input=1&output=1")
	executor, err := remotecommand.NewSPDYExecutor(cfg, "POST", u)
	if err != nil {
		log.Fatal(err)
	}
	input := strings.Repeat("abcdefgh", 25*1024)
	var stdout, stderr bytes.Buffer
	err = executor.StreamWithContext(ctx, remotecommand.StreamOptions{
		Stdin: strings.NewReader(input), Stdout: &stdout, Stderr: &stderr,
	})
	var codeErr exec.CodeExitError
	check(errors.As(err, &codeErr) && codeErr.Code == 3, "exec exit code 3 (err: %v)", err)
	check(stdout.String() == strings.ToUpper(input), "exec stdout (%d bytes)", stdout.Len())
	check(stderr.String() == "to stderr", "exec stderr %q", stderr.String())

	// exec -it: two resizes (kubectl attach -t sends w+1,h+1 then w,h), which the fake
	// process prints before its stdin, all upper-cased, then a Success status.
	u, _ = url.Parse(base + "/exec/ns/pod/c?command=fake&input=1&output=1&tty=1")
	executor, err = remotecommand.NewSPDYExecutor(cfg, "POST", u)
	if err != nil {
		log.Fatal(err)
	}
	stdout.Reset()
	err = executor.StreamWithContext(ctx, remotecommand.StreamOptions{
		Stdin: strings.NewReader("tty in"), Stdout: &stdout, Tty: true,
		TerminalSizeQueue: &sizes{list: []remotecommand.TerminalSize{{Width: 81, Height: 25}, {Width: 80, Height: 24}}},
	})
	check(err == nil && stdout.String() == "81X25 80X24 TTY IN", "exec -it: %q (err: %v)", stdout.String(), err)

	// port-forward: 20 concurrent connections through one SPDY connection.
	pf := func(ports string) (*portforward.PortForwarder, *bytes.Buffer, chan error) {
		transport, upgrader, err := spdy.RoundTripperFor(cfg)
		if err != nil {
			log.Fatal(err)
		}
		pu, _ := url.Parse(base + "/portForward/ns/pod")
		dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", pu)
		stop, ready := make(chan struct{}), make(chan struct{})
		errOut := &bytes.Buffer{}
		fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{ports}, stop, ready, io.Discard, errOut)
		if err != nil {
			log.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- fw.ForwardPorts() }()
		<-ready
		return fw, errOut, done
	}
	fw, _, _ := pf("0:8080")
	ports, _ := fw.GetPorts()
	local := fmt.Sprintf("127.0.0.1:%d", ports[0].Local)
	var wg sync.WaitGroup
	results := make([]string, 20)
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := net.Dial("tcp", local)
			if err != nil {
				results[i] = err.Error()
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "ping-%d", i)
			c.(*net.TCPConn).CloseWrite()
			b, _ := io.ReadAll(c)
			results[i] = string(b)
		}(i)
	}
	wg.Wait()
	good := 0
	for i, r := range results {
		if r == fmt.Sprintf("PING-%d", i) {
			good++
		}
	}
	check(good == 20, "port-forward: %d of 20 concurrent connections answered (%q)", good, results[0])
	fw.Close()

	// A refused port: the forwarder reports the error and drops the connection.
	fw, _, done := pf("0:9999")
	ports, _ = fw.GetPorts()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local))
	if err == nil {
		io.ReadAll(c)
		c.Close()
	}
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		err = errors.New("forwarder still running")
	}
	klog.Flush()
	reported := klogOut.String()
	check(err != nil && strings.Contains(reported, "an error occurred forwarding") &&
		strings.Contains(reported, "error forwarding port 9999 to pod sandbox-1, uid uid-1"),
		"port-forward refused port reported: %q, ForwardPorts: %v", reported, err)
	if failed {
		os.Exit(1)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// sizes hands out its terminal sizes once each, then nil, which ends the resize stream.
type sizes struct {
	mu   sync.Mutex
	list []remotecommand.TerminalSize
}

func (s *sizes) Next() *remotecommand.TerminalSize {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.list) == 0 {
		return nil
	}
	next := s.list[0]
	s.list = s.list[1:]
	return &next
}
