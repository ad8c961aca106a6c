package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

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
			Short: "Show the configuration directory's contents",
			Args:  cobra.NoArgs,
			RunE:  func(*cobra.Command, []string) error { return a.configShow() },
		},
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
	Dir              string            `json:"dir"`
	OwnerPublicKey   string            `json:"owner_public_key"`
	OwnerCertificate bool              `json:"owner_certificate"`
	CAFingerprint    string            `json:"ca_fingerprint"`
	Endpoints        []string          `json:"endpoints"`
	NodeEndpoints    map[string]string `json:"node_endpoints"`
}

func (a *app) configShow() error {
	dir, err := a.dir()
	if err != nil {
		return err
	}
	v := configView{Dir: dir, Endpoints: []string{}, NodeEndpoints: map[string]string{}}
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
