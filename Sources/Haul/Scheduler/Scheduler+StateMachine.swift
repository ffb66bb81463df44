import HeapModule

/// Decides which waiting transfer starts next under a global and a per-host limit.
package enum Scheduler {}

extension Scheduler {
    /// The queue of waiting transfers and the count of running ones: synchronous, free of I/O, clocks and locks.
    ///
    /// Transfers start by priority (higher first), and in the order they were queued within a priority, except that
    /// a transfer whose host is at its limit lets the next transfer of another host go first. Each host has its own
    /// priority queue (a heap), so choosing the next start costs O(number of hosts × log of the host's queue), not
    /// O(number of waiting transfers). Removing a waiting transfer or changing its priority is O(log n): the old entry
    /// is left in the heap and skipped when it reaches the top.
    package struct StateMachine: Sendable {
        private struct Entry: Sendable, Comparable {
            var id: TransferID
            var priority: Int
            var sequence: Int

            /// The heap's minimum is the entry to start first: the highest priority, then the oldest.
            static func < (a: Entry, b: Entry) -> Bool {
                a.priority != b.priority ? a.priority > b.priority : a.sequence < b.sequence
            }

            static func == (a: Entry, b: Entry) -> Bool {
                a.id == b.id && a.priority == b.priority && a.sequence == b.sequence
            }
        }

        /// How many transfers run at once, over all hosts.
        private(set) var maximumConcurrent: Int
        /// How many transfers run at once against one host.
        private(set) var maximumPerHost: Int
        private var queues: [String: Heap<Entry>] = [:]
        private var waiting: [TransferID: (host: String, priority: Int, sequence: Int)] = [:]
        private var runningPerHost: [String: Int] = [:]
        private var running: [TransferID: String] = [:]
        /// Running transfers that no longer use the network (their body has arrived; they are publishing their
        /// file): they hold no slot, global or per host.
        private var offNetwork: Set<TransferID> = []
        /// Hosts that asked us to wait (`Retry-After`), with how many holds are on each.
        private var holds: [String: Int] = [:]
        private var nextSequence = 0

        package init(maximumConcurrent: Int, maximumPerHost: Int) {
            precondition(maximumConcurrent > 0 && maximumPerHost > 0, "Concurrency limits must be positive")
            self.maximumConcurrent = maximumConcurrent
            self.maximumPerHost = maximumPerHost
        }

        /// The number of transfers running now, including those that have left the network.
        package var runningCount: Int { self.running.count }
        /// The number of running transfers that hold a slot (those that have not left the network).
        package var slotsInUse: Int { self.running.count - self.offNetwork.count }
        /// The number of transfers waiting for a slot.
        package var waitingCount: Int { self.waiting.count }
        /// Whether a running transfer has left the network (``leftNetwork(_:)``) and is publishing its file.
        package func hasLeftNetwork(_ id: TransferID) -> Bool { self.offNetwork.contains(id) }

        /// A transfer is ready to run; returns the transfers to start now (possibly this one).
        package mutating func enqueue(_ id: TransferID, host: String, priority: Int = 0) -> [TransferID] {
            precondition(self.waiting[id] == nil && self.running[id] == nil, "\(id) is queued twice")
            let sequence = self.nextSequence
            self.nextSequence += 1
            self.waiting[id] = (host, priority, sequence)
            self.queues[host, default: []].insert(Entry(id: id, priority: priority, sequence: sequence))
            return self.startable()
        }

        /// Changes a waiting transfer's priority (it keeps its place among transfers of the new priority by when it
        /// was queued); a no-op if it is not waiting. Returns nothing to start: a change of order frees no slot.
        mutating func setPriority(_ priority: Int, of id: TransferID) {
            guard let entry = self.waiting[id], entry.priority != priority else { return }
            self.waiting[id] = (entry.host, priority, entry.sequence)
            self.queues[entry.host, default: []].insert(Entry(id: id, priority: priority, sequence: entry.sequence))
        }

        /// The waiting transfers in the order they would start if every host had room (for tests and listings).
        var waitingOrder: [TransferID] {
            self.waiting.map { Entry(id: $0.key, priority: $0.value.priority, sequence: $0.value.sequence) }.sorted()
                .map(\.id)
        }

        /// A waiting transfer no longer wants to run (paused or cancelled); a no-op if it is not waiting.
        mutating func removeWaiting(_ id: TransferID) {
            self.waiting[id] = nil
        }

        /// A running transfer ended (finished, paused or failed); returns the transfers to start now.
        package mutating func runningEnded(_ id: TransferID) -> [TransferID] {
            guard let host = self.running.removeValue(forKey: id) else {
                preconditionFailure("\(id) ended but was not running")
            }
            if self.offNetwork.remove(id) != nil { return [] }
            self.freeSlot(of: host)
            return self.startable()
        }

        /// A running transfer no longer uses the network: its body has arrived, and what is left (recording and
        /// renaming its file) is local. Its slots go to the next transfers at once rather than after the
        /// publishing, which waits for a database commit; it still counts as running until it ends. Returns the
        /// transfers to start now; a no-op for a transfer that is not running or has left already.
        package mutating func leftNetwork(_ id: TransferID) -> [TransferID] {
            guard let host = self.running[id], self.offNetwork.insert(id).inserted else { return [] }
            self.freeSlot(of: host)
            return self.startable()
        }

        private mutating func freeSlot(of host: String) {
            self.runningPerHost[host, default: 1] -= 1
            if self.runningPerHost[host] == 0 { self.runningPerHost[host] = nil }
        }

        /// A host asked us to wait: nothing new starts against it until the hold is released.
        mutating func hold(_ host: String) {
            self.holds[host, default: 0] += 1
        }

        /// A hold on a host has passed; returns the transfers to start now.
        mutating func release(_ host: String) -> [TransferID] {
            guard let count = self.holds[host] else { return [] }
            self.holds[host] = count > 1 ? count - 1 : nil
            return self.startable()
        }

        /// Moves waiting transfers to running while the limits allow, by priority then age among hosts with room.
        private mutating func startable() -> [TransferID] {
            var started: [TransferID] = []
            while self.slotsInUse < self.maximumConcurrent {
                var best: (host: String, entry: Entry)?
                for host in Array(self.queues.keys) {
                    guard self.runningPerHost[host, default: 0] < self.maximumPerHost, self.holds[host] == nil else {
                        continue
                    }
                    guard let head = self.liveHead(of: host) else { continue }
                    if best == nil || head < best!.entry { best = (host, head) }
                }
                guard let (host, entry) = best else { break }
                self.queues[host]!.removeMin()
                if self.queues[host]!.isEmpty { self.queues[host] = nil }
                self.waiting[entry.id] = nil
                self.running[entry.id] = host
                self.runningPerHost[host, default: 0] += 1
                started.append(entry.id)
            }
            return started
        }

        /// The first entry of a host's queue that is still waiting, dropping stale ones; removes empty queues.
        private mutating func liveHead(of host: String) -> Entry? {
            while let head = self.queues[host]?.min {
                if let live = self.waiting[head.id], live.sequence == head.sequence, live.priority == head.priority {
                    return head
                }
                self.queues[host]!.removeMin()
            }
            self.queues[host] = nil
            return nil
        }
    }
}
