// krs-csi-driver is a small CSI driver for kubelet-rs's integration tests: volumes are
// directories under --data-dir, bind-mounted at the staging and target paths the node agent
// asks for. It serves the Identity, Controller (CreateVolume and DeleteVolume for a
// provisioner, publish/unpublish for the external-attacher) and Node services on one unix
// socket, with one topology segment (its node), logs every request it receives as
// one JSON line to --requests-log, and fails NodePublishVolume on demand (--fail-publish-file).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"kubelet-rs.local/hack/csi/internal/unixsock"
)

const vendorVersion = "0.1.0"

type config struct {
	name           string
	nodeID         string
	dataDir        string
	attachRequired bool
	failPublish    string
	// The size of a block volume's image, made on its first stage or publish.
	blockSize int64
}

func main() {
	sigs := unixsock.Signals()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("krs-csi-driver: ")

	var (
		endpoint    = flag.String("endpoint", "", "unix socket to serve CSI on (a stale socket there is removed)")
		name        = flag.String("driver-name", "", "the driver's name (GetPluginInfo)")
		nodeID      = flag.String("node-id", "", "this node's ID (NodeGetInfo)")
		dataDir     = flag.String("data-dir", "", "where volumes live, as <data-dir>/volumes/<volume id>")
		attach      = flag.Bool("attach-required", false, "offer PUBLISH_UNPUBLISH_VOLUME in the controller service")
		failPublish = flag.String("fail-publish-file", "", "while this file exists, NodePublishVolume fails with Internal")
		requestsLog = flag.String("requests-log", "", "append every request here as a JSON line")
		blockSize   = flag.Int64("block-size", 16<<20, "bytes of a block volume's image file")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		log.Fatalf("unexpected arguments: %v", flag.Args())
	}
	for flagName, v := range map[string]string{"endpoint": *endpoint, "driver-name": *name, "node-id": *nodeID, "data-dir": *dataDir} {
		if v == "" {
			log.Fatalf("--%s is required", flagName)
		}
	}

	sock, err := unixsock.Path(*endpoint)
	if err != nil {
		log.Fatalf("--endpoint: %v", err)
	}
	data, err := filepath.Abs(*dataDir)
	if err != nil {
		log.Fatalf("--data-dir: %v", err)
	}
	vols, err := newVolumes(data)
	if err != nil {
		log.Fatal(err)
	}
	cfg := &config{name: *name, nodeID: *nodeID, dataDir: data, attachRequired: *attach, failPublish: *failPublish, blockSize: *blockSize}

	reqs, err := openRequestLog(*requestsLog)
	if err != nil {
		log.Fatal(err)
	}

	srv := grpc.NewServer(grpc.UnaryInterceptor(reqs.intercept))
	csi.RegisterIdentityServer(srv, &identity{cfg: cfg})
	csi.RegisterControllerServer(srv, &controller{cfg: cfg, vols: vols})
	csi.RegisterNodeServer(srv, &node{cfg: cfg, vols: vols})

	lis, err := unixsock.Listen(sock)
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	log.Printf("serving %s (node %s, attach-required %v) on %s", cfg.name, cfg.nodeID, cfg.attachRequired, sock)

	code := 0
	select {
	case sig := <-sigs:
		log.Printf("%v: stopping", sig)
		unixsock.Stop(srv, 2*time.Second)
	case err := <-served:
		log.Printf("serving stopped: %v", err)
		code = 1
	}
	if err := unixsock.Remove(sock); err != nil {
		log.Printf("removing %s: %v", sock, err)
	}
	os.Exit(code)
}

// requestLog appends one line per RPC: {"method": <full method>, "request": <protojson>}.
type requestLog struct {
	mu sync.Mutex
	f  *os.File
}

func openRequestLog(path string) (*requestLog, error) {
	if path == "" {
		return &requestLog{}, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &requestLog{f: f}, nil
}

type logLine struct {
	Method  string          `json:"method"`
	Request json.RawMessage `json:"request"`
}

var requestJSON = protojson.MarshalOptions{UseProtoNames: true}

func (l *requestLog) record(method string, req any) {
	if l.f == nil {
		return
	}
	body := json.RawMessage("null")
	if m, ok := req.(proto.Message); ok {
		b, err := requestJSON.Marshal(m)
		if err != nil {
			log.Printf("%s: encoding the request: %v", method, err)
		} else {
			body = b
		}
	}
	// encoding/json compacts the raw message, so the line is one line whatever protojson's
	// spacing.
	line, err := json.Marshal(logLine{Method: method, Request: body})
	if err != nil {
		log.Printf("%s: encoding the log line: %v", method, err)
		return
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	// One unbuffered write per line: nothing waits in a buffer.
	if _, err := l.f.Write(line); err != nil {
		log.Printf("writing the requests log: %v", err)
	}
}

func (l *requestLog) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	l.record(info.FullMethod, req)
	resp, err := handler(ctx, req)
	if err != nil {
		log.Printf("%s: %v", info.FullMethod, err)
	} else {
		log.Printf("%s: ok", info.FullMethod)
	}
	return resp, err
}

type identity struct {
	csi.UnimplementedIdentityServer
	cfg *config
}

func (s *identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: s.cfg.name, VendorVersion: vendorVersion}, nil
}

func (s *identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	// The controller service always (CreateVolume, DeleteVolume), and topology: a volume is
	// on one node's disk.
	resp := &csi.GetPluginCapabilitiesResponse{}
	for _, t := range []csi.PluginCapability_Service_Type{
		csi.PluginCapability_Service_CONTROLLER_SERVICE,
		csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS,
	} {
		resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{
			Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}},
		})
	}
	return resp, nil
}

func (s *identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
