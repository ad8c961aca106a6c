package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newConfigCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show and change what the configuration directory remembers",
	}
	cmd.AddCommand(
		&cobra.Command{
			Use:   "show",
			Short: "Show the context in use: keys, certificates and endpoints",
			Args:  cobra.NoArgs,
			RunE:  func(*cobra.Command, []string) error { return a.configShow() },
		},
		&cobra.Command{
			Use:   "contexts",
			Short: "List the contexts of the configuration directory; * marks the one in use",
			Args:  cobra.NoArgs,
			RunE:  func(*cobra.Command, []string) error { return a.configContexts() },
		},
		&cobra.Command{
			Use:   "use-context NAME",
			Short: "Select the context that later commands use",
			Long: "use-context selects context NAME for every later command that has no\n" +
				"--context. \"" + defaultContext + "\" is the context whose files lie in the\n" +
				"configuration directory itself.",
			Args: exactArgs("NAME"),
			RunE: func(_ *cobra.Command, args []string) error {
				root, err := a.root()
				if err != nil {
					return err
				}
				if err := useContext(root, args[0]); err != nil {
					return err
				}
				a.printf("Using context %s of %s.\n", args[0], root)
				return nil
			},
		},
		newAddContextCommand(a),
		&cobra.Command{
			Use:   "set-node-endpoint ID=HOST:PORT...",
			Short: "Remember where to reach nodes' management ports",
			Args:  cobra.MinimumNArgs(1),
			RunE: func(_ *cobra.Command, args []string) error {
				return a.changeSettings(func(s *settings) error {
					eps, err := parseNodeEndpoints(args)
					if err != nil {
						return err
					}
					if s.NodeEndpoints == nil {
						s.NodeEndpoints = map[string]string{}
					}
					for id, ep := range eps {
						s.NodeEndpoints[id] = ep
					}
					return nil
				})
			},
		},
		&cobra.Command{
			Use:   "unset-node-endpoint ID...",
			Short: "Forget where to reach nodes' management ports",
			Args:  cobra.MinimumNArgs(1),
			RunE: func(_ *cobra.Command, args []string) error {
				return a.changeSettings(func(s *settings) error {
					for _, id := range args {
						delete(s.NodeEndpoints, id)
					}
					return nil
				})
			},
		},
		&cobra.Command{
			Use:   "set-endpoints HOST:PORT...",
			Short: "Replace the curator endpoints tried when no --endpoint is given",
			Args:  cobra.MinimumNArgs(1),
			RunE: func(_ *cobra.Command, args []string) error {
				return a.changeSettings(func(s *settings) error {
					for _, ep := range args {
						if err := checkHostPort(ep); err != nil {
							return err
						}
					}
					s.Endpoints = slices.Compact(slices.Clone(args))
					return nil
				})
			},
		},
	)
	return cmd
}

func newAddContextCommand(a *app) *cobra.Command {
	var from string
	var use bool
	cmd := &cobra.Command{
		Use:   "add-context NAME [--from DIR] [--use]",
		Short: "Add a context, empty or copied from another configuration directory",
		Long: "add-context adds context NAME to the configuration directory. Without\n" +
			"--from it is empty: `params bootstrap` and `takeownership` fill it once it\n" +
			"is in use. With --from it is a copy of the context that the configuration\n" +
			"directory DIR uses (owner key, owner certificate, cluster CA, endpoints and\n" +
			"node endpoints), replacing any context of that name. --use selects it.",
		Args: exactArgs("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			root, err := a.root()
			if err != nil {
				return err
			}
			dir, err := addContext(root, args[0], from)
			if err != nil {
				return err
			}
			a.printf("Added context %s (%s).\n", args[0], dir)
			if !use {
				return nil
			}
			if err := useContext(root, args[0]); err != nil {
				return err
			}
			a.printf("Using context %s.\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "configuration directory whose context in use to copy")
	cmd.Flags().BoolVar(&use, "use", false, "select the context")
	return cmd
}

// contextView is one line of `config contexts -o json`.
type contextView struct {
	Name             string   `json:"name"`
	Current          bool     `json:"current"`
	Dir              string   `json:"dir"`
	OwnerCertificate bool     `json:"owner_certificate"`
	CAFingerprint    string   `json:"ca_fingerprint"`
	Endpoints        []string `json:"endpoints"`
}

func (a *app) configContexts() error {
	root, current, err := a.contextInUse()
	if err != nil {
		return err
	}
	names, err := listContexts(root, current)
	if err != nil {
		return err
	}
	views := []contextView{}
	for _, name := range names {
		dir, err := contextDir(root, name)
		if err != nil {
			return err
		}
		v := contextView{Name: name, Current: name == current, Dir: dir, Endpoints: []string{}}
		_, err = os.Stat(filepath.Join(dir, ownerCertFile))
		v.OwnerCertificate = err == nil
		if ca, err := readCertificate(dir, caCertFile); err == nil {
			v.CAFingerprint = fingerprint(ca)
		}
		if s, err := readSettings(dir); err == nil {
			v.Endpoints = append(v.Endpoints, s.Endpoints...)
		}
		views = append(views, v)
	}
	if a.output == outputJSON {
		return writeJSON(a.out, views)
	}
	tw := tabwriter.NewWriter(a.out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CURRENT\tNAME\tCLUSTER CA\tENDPOINTS")
	for _, v := range views {
		mark, ca := "", "-"
		if v.Current {
			mark = "*"
		}
		if v.CAFingerprint != "" {
			ca = "SHA256:" + v.CAFingerprint[:16]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", mark, v.Name, ca, dash(strings.Join(v.Endpoints, ",")))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("when writing contexts: %w", err)
	}
	return nil
}

// changeSettings applies change to config.json.
func (a *app) changeSettings(change func(*settings) error) error {
	dir, err := a.dir()
	if err != nil {
		return err
	}
	s, err := readSettings(dir)
	if err != nil {
		return err
	}
	if err := change(s); err != nil {
		return err
	}
	return writeSettings(dir, s)
}

// configView is `config show -o json`.
type configView struct {
	Context          string            `json:"context"`
	Dir              string            `json:"dir"`
	OwnerPublicKey   string            `json:"owner_public_key"`
	OwnerCertificate bool              `json:"owner_certificate"`
	CAFingerprint    string            `json:"ca_fingerprint"`
	Endpoints        []string          `json:"endpoints"`
	NodeEndpoints    map[string]string `json:"node_endpoints"`
}

func (a *app) configShow() error {
	root, name, err := a.contextInUse()
	if err != nil {
		return err
	}
	dir, err := contextDir(root, name)
	if err != nil {
		return err
	}
	v := configView{Context: name, Dir: dir, Endpoints: []string{}, NodeEndpoints: map[string]string{}}
	if key, err := readOwnerKey(dir); err == nil {
		v.OwnerPublicKey = fmt.Sprintf("%x", []byte(key.Public().(ed25519.PublicKey)))
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, ownerCertFile)); err == nil {
		v.OwnerCertificate = true
	}
	if ca, err := readCertificate(dir, caCertFile); err == nil {
		v.CAFingerprint = fingerprint(ca)
	}
	s, err := readSettings(dir)
	if err != nil {
		return err
	}
	v.Endpoints = append(v.Endpoints, s.Endpoints...)
	for id, ep := range s.NodeEndpoints {
		v.NodeEndpoints[id] = ep
	}
	if a.output == outputJSON {
		return writeJSON(a.out, v)
	}
	a.printf("Context:                 %s\n", v.Context)
	a.printf("Configuration directory: %s\n", v.Dir)
	a.printf("Owner key:               %s\n", dash(v.OwnerPublicKey))
	a.printf("Owner certificate:       %t\n", v.OwnerCertificate)
	a.printf("Cluster CA:              %s\n", dash(v.CAFingerprint))
	a.printf("Endpoints:               %v\n", v.Endpoints)
	for _, id := range slices.Sorted(maps.Keys(v.NodeEndpoints)) {
		a.printf("Node endpoint:           %s=%s\n", id, v.NodeEndpoints[id])
	}
	return nil
}
