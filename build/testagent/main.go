// Command agent is the program of the test image that the e2e suites run
// in pods (image docker.io/cairn/agent:1, served by the harness's
// registry): a small HTTP server that says which pod answers, and the
// client the suites run in pods with kubectl exec to probe the network.
//
//	agent serve [ADDR]   answer GET / with the pod's host name (default :8080)
//	agent get URL        GET URL, print the answer; exit 1 on failure
//	agent resolve NAME   look NAME up as the pod's resolv.conf says, print
//	                     its addresses, one a line; exit 1 on failure
//	agent api PATH       GET PATH of the apiserver at
//	                     https://kubernetes.default.svc.cluster.local with
//	                     the pod's service-account token, verifying the
//	                     apiserver with the CA the pod was given
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"time"
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		args = []string{"serve"}
	}
	var err error
	switch {
	case args[0] == "serve" && len(args) <= 2:
		addr := ":8080"
		if len(args) == 2 {
			addr = args[1]
		}
		err = serve(addr)
	case args[0] == "get" && len(args) == 2:
		err = get(args[1])
	case args[0] == "resolve" && len(args) == 2:
		err = resolve(args[1])
	case args[0] == "api" && len(args) == 2:
		err = api(args[1])
	default:
		fmt.Fprintln(os.Stderr, "usage: agent serve [ADDR] | agent get URL | agent resolve NAME | agent api PATH")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "agent: %v\n", err)
		os.Exit(1)
	}
}

func serve(addr string) error {
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("when reading the host name: %w", err)
	}
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, host)
	})
	fmt.Printf("agent: serving on %s as %s\n", addr, host)
	return http.ListenAndServe(addr, nil)
}

func get(url string) error {
	return fetch(http.DefaultClient, url, "")
}

// serviceAccount is where the kubelet mounts a pod's service-account
// credentials.
const serviceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

func api(path string) error {
	token, err := os.ReadFile(serviceAccount + "/token")
	if err != nil {
		return fmt.Errorf("when reading the service-account token: %w", err)
	}
	ca, err := os.ReadFile(serviceAccount + "/ca.crt")
	if err != nil {
		return fmt.Errorf("when reading the apiserver's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %s/ca.crt", serviceAccount)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return fetch(client, "https://kubernetes.default.svc.cluster.local"+path, "Bearer "+string(token))
}

// fetch GETs url with client, with an Authorization header when auth is
// not empty, and prints the answer.
func fetch(client *http.Client, url, auth string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("when reading the answer of %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s: %s", url, resp.Status, body)
	}
	_, err = os.Stdout.Write(body)
	return err
}

func resolve(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, name)
	if err != nil {
		return err
	}
	slices.Sort(addrs)
	for _, a := range addrs {
		fmt.Println(a)
	}
	return nil
}
