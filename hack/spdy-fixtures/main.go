// Command spdy-fixtures writes SPDY/3.1 frames as a Go client (moby/spdystream's framer, the
// one client-go uses) puts them on the wire, so the Rust codec's tests can decode real bytes.
//
//	go run . ../../src/server/streaming/spdy/testdata
package main

import (
	"bytes"
	"log"
	"net/http"
	"os"
	"path/filepath"

	"github.com/moby/spdystream/spdy"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: spdy-fixtures <testdata dir>")
	}
	dir := os.Args[1]

	// An exec -it session's stream creation: error, stdin, stdout, resize (client-go v4 order),
	// then a PING, all through one framer, so the header blocks share one zlib stream.
	var exec bytes.Buffer
	f, err := spdy.NewFramer(&exec, &exec)
	if err != nil {
		log.Fatal(err)
	}
	for i, typ := range []string{"error", "stdin", "stdout", "resize"} {
		h := http.Header{}
		h.Set("streamtype", typ)
		must(f.WriteFrame(&spdy.SynStreamFrame{StreamId: spdy.StreamId(2*i + 1), Headers: h}))
	}
	must(f.WriteFrame(&spdy.DataFrame{StreamId: 3, Data: []byte("hello\n")}))
	must(f.WriteFrame(&spdy.DataFrame{StreamId: 3, Flags: spdy.DataFlagFin}))
	must(f.WriteFrame(&spdy.PingFrame{Id: 1}))
	write(filepath.Join(dir, "go_exec_client.bin"), exec.Bytes())

	// A port-forward client's two connections: error+data pairs with port and requestid.
	var pf bytes.Buffer
	f, err = spdy.NewFramer(&pf, &pf)
	if err != nil {
		log.Fatal(err)
	}
	id := spdy.StreamId(1)
	for req, port := range []string{"8080", "9999"} {
		for _, typ := range []string{"error", "data"} {
			h := http.Header{}
			h.Set("streamtype", typ)
			h.Set("port", port)
			h.Set("requestid", string(rune('0'+req)))
			must(f.WriteFrame(&spdy.SynStreamFrame{StreamId: id, Headers: h}))
			id += 2
		}
	}
	must(f.WriteFrame(&spdy.GoAwayFrame{LastGoodStreamId: 0, Status: spdy.GoAwayOK}))
	write(filepath.Join(dir, "go_portforward_client.bin"), pf.Bytes())
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func write(path string, b []byte) {
	if err := os.WriteFile(path, b, 0o644); err != nil {
		log.Fatal(err)
	}
}
