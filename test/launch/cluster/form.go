package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/test/launch"
)

// Form brings the cluster up the way an operator does: it writes
// bootstrap parameters with cairnctl (creating the owner key), boots node
// 0 with them, takes ownership once its curator serves, writes register
// parameters, boots every other node at the same moment, approves each as
// it waits for approval, and waits until cairnctl lists every node UP.
// It records the timings of each step (Phases). The nodes' progress is
// read from the markers they state (node/marker).
//
// With Config.EarlyBoot the other nodes boot with node 0, without
// parameters, and RegisterNodes gives them a parameters disk instead.
func (c *Cluster) Form(ctx context.Context) error {
	start := time.Now()
	var others []int
	for i := 1; i < c.cfg.Nodes; i++ {
		others = append(others, i)
	}
	if c.cfg.EarlyBoot {
		// All at once, as a rack powers on. Booting them once node 0's
		// firmware is done instead left node 0 serving 1-2 s sooner but
		// the others 4-6 s later, the sum of the work being the same on
		// a host whose cores the nodes share. Nor does giving node 0 the
		// larger share of them (docs/testing.md).
		for _, i := range others {
			n := c.nodes[i]
			c.logf("cluster: booting %s without parameters: it waits for a parameters disk", n.name)
			port := launch.WithHotplugPort()
			if slices.Contains(c.cfg.StickNodes, i) {
				port = launch.WithUSBPort()
			}
			if _, err := n.Boot(ctx, nil, port); err != nil {
				return err
			}
		}
	}
	vm, err := c.bootBootstrap(ctx)
	if err != nil {
		return err
	}
	if err := c.waitServing(ctx, vm); err != nil {
		return err
	}
	if err := c.TakeOwnership(ctx); err != nil {
		return err
	}
	c.phase("launch → owner's first call (takeownership) done", time.Since(start))
	if err := c.RegisterNodes(ctx, others...); err != nil {
		return err
	}
	if err := c.WaitAllUp(ctx, 10*time.Minute); err != nil {
		return err
	}
	d := time.Since(start)
	c.phase(fmt.Sprintf("launch → all %d nodes UP", c.cfg.Nodes), d)
	c.logf("cluster: all %d nodes UP, %.1f s after the first launch", c.cfg.Nodes, d.Seconds())
	return nil
}

// ReleaseKeyFile names the file beside Config.Image that holds the public
// half of the release key the image's release is signed with, as make
// release writes it (out/release.pub).
const ReleaseKeyFile = "release.pub"

// BootstrapParams writes bootstrap parameters with cairnctl (which makes
// the owner key in the config directory if there is none) and returns
// them. The cluster trusts the release key of ReleaseKeyFile beside the
// image when there is one, and no release key otherwise.
func (c *Cluster) BootstrapParams(ctx context.Context) ([]byte, error) {
	file := filepath.Join(c.cfg.Dir, "params", "bootstrap.pb")
	args := []string{"--config", c.configDir, "params", "bootstrap", "--out", file,
		"--storage-security", c.cfg.StorageSecurity, "--tpm", c.cfg.TPMMode}
	if c.cfg.SecureBoot != "" {
		args = append(args, "--secure-boot", c.cfg.SecureBoot)
	}
	if c.cfg.Registry != "" {
		args = append(args, registryFlags()...)
	}
	key, err := releaseKeyBeside(c.cfg.Image)
	if err != nil {
		return nil, err
	}
	if key != "" {
		c.logf("cluster: the cluster trusts the release key of %s", key)
		args = append(args, "--release-key", "@"+key)
	}
	_, err = c.run(ctx, args)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(file)
}

// Bootstrap boots node 0 with fresh bootstrap parameters and waits until
// its curator serves (marker.CuratorServing).
func (c *Cluster) Bootstrap(ctx context.Context) error {
	vm, err := c.bootBootstrap(ctx)
	if err != nil {
		return err
	}
	return c.waitServing(ctx, vm)
}

// bootBootstrap boots node 0 with fresh bootstrap parameters.
func (c *Cluster) bootBootstrap(ctx context.Context) (*launch.Node, error) {
	params, err := c.BootstrapParams(ctx)
	if err != nil {
		return nil, err
	}
	n := c.nodes[0]
	c.logf("cluster: booting %s with bootstrap parameters", n.name)
	return n.Boot(ctx, params)
}

// waitServing waits until node 0, booted as vm, serves its curator and
// names itself.
func (c *Cluster) waitServing(ctx context.Context, vm *launch.Node) error {
	n := c.nodes[0]
	l, err := n.WaitFor(ctx, 0, launch.Mark(marker.CuratorServing))
	if err != nil {
		return fmt.Errorf("waiting for node 0 to serve: %w", err)
	}
	if _, err := n.WaitID(ctx); err != nil {
		return err
	}
	c.phase("launch → node 0 curator serving", l.Time.Sub(vm.Started()))
	return nil
}

// TakeOwnership runs cairnctl takeownership against node 0 until it
// succeeds: the curator may serve a moment before it leads.
func (c *Cluster) TakeOwnership(ctx context.Context) error {
	start := time.Now()
	attempts, err := Retry(ctx, 3*time.Minute, func(ctx context.Context) error {
		_, err := c.CairnctlVia(ctx, 0, "takeownership")
		return err
	})
	if err != nil {
		return fmt.Errorf("taking ownership: %w", err)
	}
	c.phase("takeownership (curator serving → owner certificate)", time.Since(start))
	c.logf("cluster: took ownership in %.1f s (%d attempts); owner files in %s", time.Since(start).Seconds(), attempts, c.configDir)
	return nil
}

// RegisterParams writes register parameters with cairnctl (ticket, CA and
// cluster directory from the cluster) and returns them.
func (c *Cluster) RegisterParams(ctx context.Context) ([]byte, error) {
	file := filepath.Join(c.cfg.Dir, "params", "register.pb")
	if _, err := Retry(ctx, 2*time.Minute, func(ctx context.Context) error {
		_, err := c.Cairnctl(ctx, "params", "register", "--out", file)
		return err
	}); err != nil {
		return nil, err
	}
	return os.ReadFile(file)
}

// RegisterDisk writes a parameters disk of register parameters with
// cairnctl (params register --disk) and returns its path.
func (c *Cluster) RegisterDisk(ctx context.Context) (string, error) {
	file := filepath.Join(c.cfg.Dir, "params", "register-disk.img")
	if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("when removing the last parameters disk: %w", err)
	}
	if _, err := Retry(ctx, 2*time.Minute, func(ctx context.Context) error {
		_, err := c.Cairnctl(ctx, "params", "register", "--disk", file)
		return err
	}); err != nil {
		return "", err
	}
	return file, nil
}

// RegisterNodes has the given nodes register at the same moment: it boots
// them with register parameters, or, for those that run already waiting
// for parameters (Config.EarlyBoot), plugs a parameters disk into each.
// It approves each as it waits for approval, and waits for each to
// commit.
func (c *Cluster) RegisterNodes(ctx context.Context, nodes ...int) error {
	if len(nodes) == 0 {
		return nil
	}
	vms := make([]*launch.Node, len(nodes))
	var disk string
	var params []byte
	for k, i := range nodes {
		n := c.nodes[i]
		if !n.Running() {
			if params == nil {
				p, err := c.RegisterParams(ctx)
				if err != nil {
					return err
				}
				params = p
			}
			vm, err := n.Boot(ctx, params)
			if err != nil {
				return err
			}
			vms[k] = vm
			continue
		}
		if disk == "" {
			d, err := c.RegisterDisk(ctx)
			if err != nil {
				return err
			}
			disk = d
		}
		vm := n.VM()
		attach, what := vm.AttachDisk, "disk"
		if slices.Contains(c.cfg.StickNodes, i) {
			attach, what = vm.AttachStick, "USB stick"
		}
		if err := attach(ctx, disk); err != nil {
			return err
		}
		c.logf("cluster: plugged a parameters %s into %s", what, n.name)
		vms[k] = vm
	}
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for k, i := range nodes {
		wg.Go(func() { errs[k] = c.approve(ctx, c.nodes[i], vms[k]) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// approve waits for n to wait for approval (marker.WaitingForApproval),
// approves the ID it names and waits for that ID to commit
// (marker.Committed).
func (c *Cluster) approve(ctx context.Context, n *Node, vm *launch.Node) error {
	waiting, err := n.WaitFor(ctx, 0, launch.Mark(marker.WaitingForApproval))
	if err != nil {
		return err
	}
	id, err := n.noteID(waiting)
	if err != nil {
		return err
	}
	if _, err := Retry(ctx, 2*time.Minute, func(ctx context.Context) error {
		_, err := c.Cairnctl(ctx, "node", "approve", id)
		return err
	}); err != nil {
		return fmt.Errorf("approving %s (%s): %w", n.name, id, err)
	}
	c.logf("cluster: approved %s (%s)", n.name, id)
	l, err := n.WaitFor(ctx, 0, launch.Mark(marker.Committed, "node", id))
	if err != nil {
		return err
	}
	c.phase(fmt.Sprintf("%s launch → committed", n.name), l.Time.Sub(vm.Started()))
	return nil
}

// WaitAllUp polls cairnctl node list until it shows every node of the
// cluster UP.
func (c *Cluster) WaitAllUp(ctx context.Context, timeout time.Duration) error {
	_, err := Retry(ctx, timeout, func(ctx context.Context) error {
		nodes, err := c.ListNodes(ctx)
		if err != nil {
			return err
		}
		up := map[string]bool{}
		for _, n := range nodes {
			up[n.ID] = n.State == "UP"
		}
		for _, n := range c.Nodes() {
			if !up[n.ID()] {
				return fmt.Errorf("%s (%s) is not UP in %+v: %w", n.name, n.ID(), nodes, errNotYet)
			}
		}
		return nil
	})
	return err
}

// Milestone is a console line, a marker as a rule, that ends a phase of a
// boot.
type Milestone struct {
	// Name names the phase that ends at the line.
	Name string
	// Line matches the line.
	Line launch.Matcher
}

// Milestones returns, for each milestone found on vm's console from line
// from on, the time from qemu's start to its first line on the host
// clock. Each is looked for on its own, so lines that come in another
// order than ms lists them are still found. Milestones that are missing
// are returned in missing.
func Milestones(vm *launch.Node, from int, ms []Milestone) (phases []launch.Phase, missing []string) {
	for _, m := range ms {
		l, ok := vm.Console().Find(from, m.Line)
		if !ok {
			missing = append(missing, m.Name)
			continue
		}
		phases = append(phases, launch.Phase{Name: m.Name, Duration: l.Time.Sub(vm.Started())})
	}
	return phases, missing
}

// releaseKeyBeside returns the path of ReleaseKeyFile beside image, or ""
// when there is none, so that images built without make release still
// form clusters (which then trust no release key).
func releaseKeyBeside(image string) (string, error) {
	path := filepath.Join(filepath.Dir(image), ReleaseKeyFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("when looking for the release key beside the image: %w", err)
	}
	return path, nil
}
