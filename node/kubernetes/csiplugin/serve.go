package csiplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/proto/pluginregistration"
)

// Sockets says where the plugin serves, below the kubelet's root
// directory.
type Sockets struct {
	// CSI is the socket of the Identity and Node services:
	// <kubelet root>/plugins/local.cairn.dev/csi.sock.
	CSI string
	// Registration is the socket the kubelet finds the plugin by:
	// <kubelet root>/plugins_registry/local.cairn.dev-reg.sock.
	Registration string
}

// KubeletSockets returns the sockets of the plugin for the kubelet whose
// root directory is root.
func KubeletSockets(root string) Sockets {
	return Sockets{
		CSI:          filepath.Join(root, "plugins", DriverName, "csi.sock"),
		Registration: filepath.Join(root, "plugins_registry", DriverName+"-reg.sock"),
	}
}

// Serve serves p on s.CSI and registers it with the kubelet through
// s.Registration until ctx ends. It is a supervisor runnable's body: each
// socket is served by a child of its own, restarted on its own.
func (p *Plugin) Serve(ctx context.Context, s Sockets) error {
	log := supervisor.Logger(ctx)
	for _, c := range []struct {
		name, socket string
		register     func(*grpc.Server)
	}{
		{"csi", s.CSI, func(srv *grpc.Server) {
			csi.RegisterIdentityServer(srv, p)
			csi.RegisterNodeServer(srv, p)
		}},
		{"registration", s.Registration, func(srv *grpc.Server) {
			pluginregistration.RegisterRegistrationServer(srv, &registration{endpoint: s.CSI, log: log})
		}},
	} {
		if err := supervisor.Run(ctx, c.name, func(ctx context.Context) error {
			ln, err := listenUnix(c.socket)
			if err != nil {
				return err
			}
			srv := grpc.NewServer()
			c.register(srv)
			return serveUntil(ctx, srv, ln)
		}); err != nil {
			return fmt.Errorf("when starting the %s server: %w", c.name, err)
		}
	}
	log.Infof("CSI driver %s serving on %s, registering through %s", DriverName, s.CSI, s.Registration)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// serveUntil serves srv on ln until ctx ends; then it stops srv.
func serveUntil(ctx context.Context, srv *grpc.Server, ln net.Listener) error {
	stop := context.AfterFunc(ctx, srv.Stop)
	defer stop()
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	err := srv.Serve(ln)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("when serving on %s: %w", ln.Addr(), err)
}

// listenUnix listens on the unix socket path, replacing one left by an
// earlier run.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("when creating the directory of %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("when removing the old socket %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("when listening on %s: %w", path, err)
	}
	return ln, nil
}

// registration is the plugin's side of the kubelet's plugin registration.
type registration struct {
	pluginregistration.UnimplementedRegistrationServer
	endpoint string
	log      logtree.LeveledLogger
}

// supportedVersions are the versions of the CSI spec the plugin speaks,
// as the kubelet asks for them.
var supportedVersions = []string{"1.0.0"}

func (r *registration) GetInfo(context.Context, *pluginregistration.InfoRequest) (*pluginregistration.PluginInfo, error) {
	return &pluginregistration.PluginInfo{Type: "CSIPlugin", Name: DriverName, Endpoint: r.endpoint, SupportedVersions: supportedVersions}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, st *pluginregistration.RegistrationStatus) (*pluginregistration.RegistrationStatusResponse, error) {
	if st.GetPluginRegistered() {
		r.log.Infof("The kubelet registered the CSI driver %s", DriverName)
	} else {
		r.log.Errorf("The kubelet refused the CSI driver %s: %s", DriverName, st.GetError())
	}
	return &pluginregistration.RegistrationStatusResponse{}, nil
}
