// krs-csi-provisioner provisions PersistentVolumes for one CSI driver, as upstream's
// external-provisioner does (which the Go module proxy here does not serve): on
// sigs.k8s.io/sig-storage-lib-external-provisioner, a claim of a StorageClass whose
// provisioner is the driver's name gets a volume by the driver's CreateVolume and a PV built
// from it (WaitForFirstConsumer: once the scheduler has picked the node, which CreateVolume
// is asked to reach); a released PV with reclaim policy Delete is removed by DeleteVolume.
// No leader election (one instance per driver), no secrets, snapshots, clones or capacity
// tracking.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	"kubelet-rs.local/hack/csi/internal/unixsock"
)

func main() {
	klog.InitFlags(nil)
	var (
		csiAddress     = flag.String("csi-address", "", "the CSI driver's unix socket")
		kubeconfig     = flag.String("kubeconfig", "", "kubeconfig of the API server (empty: in-cluster)")
		timeout        = flag.Duration("timeout", 10*time.Second, "deadline of each CreateVolume and DeleteVolume call")
		connectTimeout = flag.Duration("connect-timeout", 30*time.Second, "how long to wait for the driver to answer at start")
		extraMetadata  = flag.Bool("extra-create-metadata", false, "add the claim's name and namespace and the PV's name to CreateVolume's parameters")
		retryStart     = flag.Duration("retry-interval-start", time.Second, "first delay before a failed provisioning or deletion is tried again (doubles each failure)")
		retryMax       = flag.Duration("retry-interval-max", 5*time.Minute, "longest delay between tries")
		workers        = flag.Int("worker-threads", 4, "claims and volumes handled at once")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		klog.Exitf("unexpected arguments: %v", flag.Args())
	}
	if *csiAddress == "" {
		klog.Exit("--csi-address is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	d, err := connect(ctx, *csiAddress, *kubeconfig, *connectTimeout)
	if err != nil {
		klog.ErrorS(err, "krs-csi-provisioner")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	defer d.conn.Close()
	p := &csiProvisioner{
		driver: d.name,
		// external-provisioner's form: start time in ms, a random number, the driver.
		identity:      fmt.Sprintf("%d-%04d-%s", time.Now().UnixMilli(), rand.IntN(10000), d.name),
		controller:    csi.NewControllerClient(d.conn),
		client:        d.client,
		topology:      d.topology,
		extraMetadata: *extraMetadata,
		timeout:       *timeout,
	}
	klog.InfoS("Provisioning", "driver", d.name, "topology", d.topology)
	controller.NewProvisionController(ctx, d.client, d.name, p,
		controller.LeaderElection(false),
		// The finalizer external-provisioner puts on the PVs it makes, so a PV object
		// deleted early still has its volume deleted first.
		controller.AddFinalizer(true),
		controller.Threadiness(*workers),
		controller.RateLimiter(workqueue.NewTypedItemExponentialFailureRateLimiter[string](*retryStart, *retryMax)),
		controller.CreateProvisionedPVInterval(*retryStart),
	).Run(ctx)
	klog.Flush()
}

// driverConn is the driver (its connection, name, topology support) and the API client.
type driverConn struct {
	conn     *grpc.ClientConn
	name     string
	topology bool
	client   kubernetes.Interface
}

// connect connects to the API server and to the driver.
func connect(ctx context.Context, csiAddress, kubeconfig string, connectTimeout time.Duration) (*driverConn, error) {
	endpoint, err := unixsock.Path(csiAddress)
	if err != nil {
		return nil, fmt.Errorf("--csi-address: %w", err)
	}
	var cfg *rest.Config
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("API server configuration: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}

	conn, err := grpc.NewClient("passthrough:///"+endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(unixsock.Dialer))
	if err != nil {
		return nil, err
	}
	name, topology, err := probeDriver(ctx, conn, endpoint, connectTimeout)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &driverConn{conn: conn, name: name, topology: topology, client: client}, nil
}

// probeDriver waits for the driver to answer GetPluginInfo (it may still be starting), then
// reads its capabilities: it must have CREATE_DELETE_VOLUME; topology says whether it has
// VOLUME_ACCESSIBILITY_CONSTRAINTS.
func probeDriver(ctx context.Context, conn *grpc.ClientConn, endpoint string, wait time.Duration) (name string, topology bool, err error) {
	identity := csi.NewIdentityClient(conn)
	deadline := time.Now().Add(wait)
	for {
		callCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
		info, err := identity.GetPluginInfo(callCtx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil {
			name = info.GetName()
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", false, fmt.Errorf("GetPluginInfo on %s: %w", endpoint, err)
		}
		klog.InfoS("Waiting for the driver", "endpoint", endpoint, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	if name == "" {
		return "", false, fmt.Errorf("the driver at %s reports no name", endpoint)
	}
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	plugin, err := identity.GetPluginCapabilities(callCtx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		return "", false, fmt.Errorf("GetPluginCapabilities of %s: %w", name, err)
	}
	for _, c := range plugin.GetCapabilities() {
		if c.GetService().GetType() == csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS {
			topology = true
		}
	}
	ctl, err := csi.NewControllerClient(conn).ControllerGetCapabilities(callCtx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		return "", false, fmt.Errorf("ControllerGetCapabilities of %s: %w", name, err)
	}
	if !slices.ContainsFunc(ctl.GetCapabilities(), func(c *csi.ControllerServiceCapability) bool {
		return c.GetRpc().GetType() == csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME
	}) {
		return "", false, fmt.Errorf("driver %s: %w", name, errNoCreateDelete)
	}
	return name, topology, nil
}
