// krs-csi-registrar is a minimal node-driver-registrar for kubelet-rs's integration tests: it
// asks the CSI driver at --csi-address for its name, then serves the kubelet plugin
// registration service (pluginregistration/v1) on <plugin-registration-dir>/<name>-reg.sock,
// pointing the node agent at the driver's socket. Stopping it (SIGTERM, SIGINT) removes that
// socket, which deregisters the driver.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"kubelet-rs.local/hack/csi/internal/unixsock"
)

// The CSI versions the driver speaks, as the kubelet wants them listed.
var supportedVersions = []string{"1.0.0"}

func main() {
	sigs := unixsock.Signals()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("krs-csi-registrar: ")

	var (
		csiAddress = flag.String("csi-address", "", "the CSI driver's unix socket")
		regDir     = flag.String("plugin-registration-dir", "", "the node agent's plugins_registry directory")
		timeout    = flag.Duration("connect-timeout", 30*time.Second, "how long to wait for the driver to answer GetPluginInfo")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		log.Fatalf("unexpected arguments: %v", flag.Args())
	}
	if *csiAddress == "" || *regDir == "" {
		log.Fatal("--csi-address and --plugin-registration-dir are required")
	}
	endpoint, err := unixsock.Path(*csiAddress)
	if err != nil {
		log.Fatalf("--csi-address: %v", err)
	}
	dir, err := filepath.Abs(*regDir)
	if err != nil {
		log.Fatalf("--plugin-registration-dir: %v", err)
	}

	name, err := driverName(endpoint, *timeout, sigs)
	if err != nil {
		log.Fatal(err)
	}
	if name == "" || strings.ContainsAny(name, "/\x00") {
		log.Fatalf("the driver at %s reports an unusable name %q", endpoint, name)
	}
	log.Printf("driver %s at %s", name, endpoint)

	if err := os.MkdirAll(dir, 0o750); err != nil {
		log.Fatal(err)
	}
	sock := filepath.Join(dir, name+"-reg.sock")
	lis, err := unixsock.Listen(sock)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	registration.RegisterRegistrationServer(srv, &registrar{name: name, endpoint: endpoint})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	log.Printf("registration socket %s", sock)

	code := 0
	select {
	case sig := <-sigs:
		log.Printf("%v: removing %s", sig, sock)
	case err := <-served:
		log.Printf("serving stopped: %v", err)
		code = 1
	}
	// The socket goes first: its removal is what tells the node agent to deregister.
	if err := unixsock.Remove(sock); err != nil {
		log.Printf("removing %s: %v", sock, err)
		code = 1
	}
	unixsock.Stop(srv, 2*time.Second)
	os.Exit(code)
}

// driverName asks the driver for its name, retrying until it answers or timeout passes (the
// driver may still be starting); a signal gives up at once.
func driverName(endpoint string, timeout time.Duration, sigs <-chan os.Signal) (string, error) {
	conn, err := grpc.NewClient("passthrough:///"+endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(unixsock.Dialer))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	client := csi.NewIdentityClient(conn)
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		resp, err := client.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil {
			return resp.GetName(), nil
		}
		if time.Now().After(deadline) {
			return "", err
		}
		log.Printf("GetPluginInfo on %s: %v (retrying)", endpoint, err)
		select {
		case sig := <-sigs:
			log.Printf("%v before the driver answered", sig)
			os.Exit(0)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

type registrar struct {
	registration.UnimplementedRegistrationServer
	name     string
	endpoint string
}

func (r *registrar) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	log.Printf("GetInfo")
	return &registration.PluginInfo{
		Type:              registration.CSIPlugin,
		Name:              r.name,
		Endpoint:          r.endpoint,
		SupportedVersions: supportedVersions,
	}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, st *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	if st.GetPluginRegistered() {
		log.Printf("plugin_registered: %s is registered with the node agent", r.name)
	} else {
		log.Printf("error: the node agent did not register %s: %s", r.name, st.GetError())
	}
	return &registration.RegistrationStatusResponse{}, nil
}
