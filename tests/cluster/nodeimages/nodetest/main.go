// causalflow-nodetest is the image the real-node e2e tests run (built here: no registry).
//
//	serve [port]     HTTP on :port (default 8080): /healthz answers "ok", / answers the hostname
//	echo WORDS...    print WORDS (what `kubectl exec` runs)
//	crash [code]     print a line and exit with code (default 3)
//	oom              allocate and touch memory until the kernel kills it
package main

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

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
