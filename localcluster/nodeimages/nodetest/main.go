// causalflow-nodetest is the image the real-node e2e tests run (built here: no registry).
//
//	serve [port]     HTTP on :port (default 8080): /healthz answers "ok", / answers the hostname
//	echo WORDS...    print WORDS (what `kubectl exec` runs)
//	crash [code]     print a line and exit with code (default 3)
//	oom              allocate and touch memory until the kernel kills it
//	cat FILE         print FILE (the image has no shell)
//	get URL          GET URL as the pod's ServiceAccount (its token and CA), print status and body
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount/"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: causalflow-nodetest serve|echo|crash|oom")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "serve":
		serve(args)
	case "echo":
		fmt.Println(strings.Join(args, " "))
	case "crash":
		code := 3
		if len(args) > 0 {
			code, _ = strconv.Atoi(args[0])
		}
		fmt.Printf("causalflow-nodetest: crashing with exit code %d\n", code)
		os.Exit(code)
	case "cat":
		data, err := os.ReadFile(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Stdout.Write(data)
	case "get":
		get(args[0])
	case "oom":
		var keep [][]byte
		for {
			chunk := make([]byte, 16<<20)
			for i := range chunk {
				chunk[i] = 1
			}
			keep = append(keep, chunk)
			time.Sleep(10 * time.Millisecond)
		}
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func serve(args []string) {
	port := "8080"
	if len(args) > 0 {
		port = args[0]
	}
	host, _ := os.Hostname()
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, host) })
	fmt.Printf("causalflow-nodetest: serving on :%s as %s\n", port, host)
	if err := http.ListenAndServe(":"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func get(url string) {
	pool := x509.NewCertPool()
	if ca, err := os.ReadFile(saDir + "ca.crt"); err == nil {
		pool.AppendCertsFromPEM(ca)
	}
	client := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token, err := os.ReadFile(saDir + "token"); err == nil {
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d\n%s\n", resp.StatusCode, body)
}
