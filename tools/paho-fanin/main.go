// Command paho-fanin is a reference load generator built on the Eclipse Paho Go client, the
// kind of hand-written tool the public broker write-ups used. It runs the S1 fan-in test
// (C publisher connections driven by P workers, one wildcard subscriber) so that
// `hayate bench fan-in` can be compared with it on the same machine and broker.
// See docs/BENCHMARKS.md.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	return float64(usage.Utime.Sec+usage.Stime.Sec) + float64(usage.Utime.Usec+usage.Stime.Usec)/1e6
}

// procCPUSeconds is the user+system CPU time of another process, from /proc/PID/stat (fields
// 14 and 15, in USER_HZ ticks: 100 per second on Linux); -1 if it cannot be read.
func procCPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return (utime + stime) / 100
}

func main() {
	broker := flag.String("broker", "tcp://127.0.0.1:1883", "broker URL")
	conns := flag.Int("c", 1000, "publisher connections")
	workers := flag.Int("w", 100, "parallel publishing goroutines")
	total := flag.Int("n", 100000, "messages in total")
	qos := flag.Int("q", 0, "publisher QoS")
	subQos := flag.Int("sub-qos", 0, "subscriber QoS")
	size := flag.Int("s", 24, "payload bytes (at least 8: a sequence number; from 16 on also the send time, and the latency from the publish call to the subscriber's handler is reported)")
	window := flag.Int("window", 100000, "senders may run at most this many messages ahead of the receiver")
	prefix := flag.String("prefix", "pf", "topic prefix")
	wait := flag.Bool("wait", false, "wait for each QoS 0 publish too (until written to the socket), as the write-ups' publishers do; QoS 1 and 2 always wait for the ack")
	persistent := flag.Bool("persistent", false, "every client keeps its session (clean session off): the subscriber's messages are queued in its persistent session")
	subBroker := flag.String("sub-broker", "", "broker URL of the subscriber (default: -broker); another node of a cluster makes every message cross between nodes")
	brokerPids := flag.String("broker-pid", "", "also print the CPU time of these processes (comma-separated pids: the broker, or the nodes of a cluster) over the publishing phase (connections excluded)")
	flag.Parse()
	if *size < 8 {
		*size = 8
	}

	var received atomic.Int64
	done := make(chan struct{})
	var latMu sync.Mutex
	latencies := make([]int64, 0, *total)
	if *subBroker == "" {
		*subBroker = *broker
	}
	var pids []int
	for _, f := range strings.Split(*brokerPids, ",") {
		if pid, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	subOpts := mqtt.NewClientOptions().AddBroker(*subBroker).SetClientID(*prefix + "-sub").SetCleanSession(!*persistent)
	subOpts.SetDefaultPublishHandler(func(mqtt.Client, mqtt.Message) {})
	sub := mqtt.NewClient(subOpts)
	if t := sub.Connect(); t.Wait() && t.Error() != nil {
		fmt.Fprintln(os.Stderr, "subscriber connect:", t.Error())
		os.Exit(1)
	}
	sub.Subscribe(*prefix+"/#", byte(*subQos), func(_ mqtt.Client, m mqtt.Message) {
		if p := m.Payload(); len(p) >= 16 {
			sentAt := int64(binary.BigEndian.Uint64(p[8:16]))
			latMu.Lock()
			latencies = append(latencies, time.Now().UnixNano()-sentAt)
			latMu.Unlock()
		}
		if received.Add(1) == int64(*total) {
			close(done)
		}
	}).Wait()

	connectStart := time.Now()
	clients := make([]mqtt.Client, *conns)
	var wg sync.WaitGroup
	var failed atomic.Int64
	sem := make(chan struct{}, *workers)
	for i := range clients {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			opts := mqtt.NewClientOptions().AddBroker(*broker).SetClientID(fmt.Sprintf("%s-%d", *prefix, i)).SetCleanSession(!*persistent)
			c := mqtt.NewClient(opts)
			if t := c.Connect(); t.Wait() && t.Error() != nil {
				failed.Add(1)
				return
			}
			clients[i] = c
		}(i)
	}
	wg.Wait()
	connectSecs := time.Since(connectStart).Seconds()

	cpuStart := cpuSeconds()
	brokerStart := make([]float64, len(pids))
	for i, pid := range pids {
		brokerStart[i] = procCPUSeconds(pid)
	}
	start := time.Now()
	var sent atomic.Int64
	perWorker := *total / *workers
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			payload := make([]byte, *size)
			count := perWorker
			if w == *workers-1 {
				count = *total - perWorker*(*workers-1)
			}
			for k := 0; k < count; k++ {
				for sent.Load()-received.Load() >= int64(*window) {
					time.Sleep(100 * time.Microsecond)
				}
				idx := (w + k*(*workers)) % *conns
				c := clients[idx]
				if c == nil {
					continue
				}
				binary.BigEndian.PutUint64(payload, uint64(sent.Add(1)))
				if *size >= 16 {
					binary.BigEndian.PutUint64(payload[8:16], uint64(time.Now().UnixNano()))
				}
				t := c.Publish(fmt.Sprintf("%s/%06d", *prefix, idx), byte(*qos), false, payload)
				if *qos > 0 || *wait {
					t.Wait()
				}
			}
		}(w)
	}
	wg.Wait()
	sendSecs := time.Since(start).Seconds()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
	recvSecs := time.Since(start).Seconds()
	cpu := cpuSeconds() - cpuStart
	brokerEnd := make([]float64, len(pids))
	for i, pid := range pids {
		brokerEnd[i] = procCPUSeconds(pid)
	}
	got := received.Load()
	fmt.Printf("connections %d (%d failed) in %.2f s: %.0f conn/s\n", *conns, failed.Load(), connectSecs, float64(*conns)/connectSecs)
	fmt.Printf("sent %d in %.2f s: %.0f msg/s\n", sent.Load(), sendSecs, float64(sent.Load())/sendSecs)
	fmt.Printf("received %d in %.2f s: %.0f msg/s, success %.2f%%\n", got, recvSecs, float64(got)/recvSecs, 100*float64(got)/float64(*total))
	fmt.Printf("client cpu %.2f s (%.0f%% of one core)\n", cpu, 100*cpu/recvSecs)
	latMu.Lock()
	if n := len(latencies); n > 0 {
		sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
		at := func(q float64) float64 { return float64(latencies[int(q*float64(n-1))]) / 1e6 }
		fmt.Printf("latency ms p50 %.3f p99 %.3f p99.9 %.3f max %.3f (%d messages, publish call to handler)\n", at(0.5), at(0.99), at(0.999), at(1), n)
	}
	latMu.Unlock()
	for i, pid := range pids {
		if brokerStart[i] < 0 || brokerEnd[i] < 0 {
			continue
		}
		used := brokerEnd[i] - brokerStart[i]
		if len(pids) == 1 {
			fmt.Printf("broker cpu %.2f s (%.0f%% of one core)\n", used, 100*used/recvSecs)
		} else {
			fmt.Printf("broker %d cpu %.2f s (%.0f%% of one core)\n", pid, used, 100*used/recvSecs)
		}
	}
	for _, c := range clients {
		if c != nil {
			c.Disconnect(0)
		}
	}
	sub.Disconnect(0)
}
