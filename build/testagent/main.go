// Command agent is the program of the test image that the e2e suites run
// in pods (image docker.io/cairn/agent:1, served by the harness's
// registry): a small HTTP server that says which pod answers, and the
// client the suites run in pods with kubectl exec to probe the network.
//
//	agent serve [ADDR]   answer GET / with the pod's host name (default :8080)
//	agent get URL        GET URL, print the answer; exit 1 on failure
//	agent resolve NAME   look NAME up as the pod's resolv.conf says, print
//	                     its addresses, one a line; exit 1 on failure
package main

import (
	"context"
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
	default:
		fmt.Fprintln(os.Stderr, "usage: agent serve [ADDR] | agent get URL | agent resolve NAME")
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
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
