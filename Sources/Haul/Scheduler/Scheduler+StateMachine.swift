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

        /// A host's queue and counts. Hosts are numbered while they have something queued, running or held, so that
        /// choosing the next start reads arrays rather than hashing host names (about five hashes a start).
        private struct Host: Sendable {
            var name: String
            var queue = Heap<Entry>()
            /// Running transfers that hold a slot (not those that left the network).
            var running = 0
            /// Holds asked for by `Retry-After`.
            var holds = 0
            /// Where the host is in ``hostsWithQueue`` while its queue is not empty.
            var queuePosition: Int?
            /// False once forgotten, until the number is given to a host again.
            var isTracked = true

            init(name: String) { self.name = name }
        }

        /// How many transfers run at once, over all hosts.
        private(set) var maximumConcurrent: Int
        /// How many transfers run at once against one host.
        private(set) var maximumPerHost: Int
        private var hostNumbers: [String: Int] = [:]
        private var hosts: [Host] = []
        /// Numbers in ``hosts`` that are free to reuse: their host had nothing queued, running or held.
        private var freeHostNumbers: [Int] = []
        /// The hosts whose queues are not empty (some entries may be stale), in no particular order.
        private var hostsWithQueue: [Int] = []
        private var waiting: [TransferID: (host: Int, priority: Int, sequence: Int)] = [:]
        /// Running transfers and their hosts' numbers; those that left the network no longer use theirs (their host
        /// may have been forgotten and its number reused).
        private var running: [TransferID: Int] = [:]
        /// Running transfers that no longer use the network (their body has arrived; they are publishing their
        /// file): they hold no slot, global or per host.
        private var offNetwork: Set<TransferID> = []
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

        /// Makes room for `count` more waiting transfers at once (see
        /// ``TransferManager/Core/reserveCapacity(forMoreTransfers:)``).
        mutating func reserveCapacity(forMoreWaiting count: Int) {
            self.waiting.reserveCapacity(self.waiting.count + count)
        }

        /// A transfer is ready to run; returns the transfers to start now (possibly this one).
        package mutating func enqueue(_ id: TransferID, host: String, priority: Int = 0) -> [TransferID] {
            precondition(self.waiting[id] == nil && self.running[id] == nil, "\(id) is queued twice")
            let sequence = self.nextSequence
            self.nextSequence += 1
            let number = self.number(of: host)
            self.waiting[id] = (number, priority, sequence)
            self.insert(Entry(id: id, priority: priority, sequence: sequence), into: number)
            return self.startable()
        }

        /// Changes a waiting transfer's priority (it keeps its place among transfers of the new priority by when it
        /// was queued); a no-op if it is not waiting. Returns nothing to start: a change of order frees no slot.
        mutating func setPriority(_ priority: Int, of id: TransferID) {
            guard let entry = self.waiting[id], entry.priority != priority else { return }
            self.waiting[id] = (entry.host, priority, entry.sequence)
            self.insert(Entry(id: id, priority: priority, sequence: entry.sequence), into: entry.host)
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

        private mutating func freeSlot(of host: Int) {
            self.hosts[host].running -= 1
            self.forgetIfIdle(host)
        }

        /// A host asked us to wait: nothing new starts against it until the hold is released.
        mutating func hold(_ host: String) {
            self.hosts[self.number(of: host)].holds += 1
        }

        /// A hold on a host has passed; returns the transfers to start now.
        mutating func release(_ host: String) -> [TransferID] {
            guard let number = self.hostNumbers[host], self.hosts[number].holds > 0 else { return [] }
            self.hosts[number].holds -= 1
            self.forgetIfIdle(number)
            return self.startable()
        }

        /// The number of the hosts this scheduler keeps track of: those with something queued, running or held.
        var trackedHostCount: Int { self.hostNumbers.count }

        /// Moves waiting transfers to running while the limits allow, by priority then age among hosts with room.
        private mutating func startable() -> [TransferID] {
            var started: [TransferID] = []
            while self.slotsInUse < self.maximumConcurrent {
                var best: (host: Int, entry: Entry)?
                var position = 0
                while position < self.hostsWithQueue.count {
                    let host = self.hostsWithQueue[position]
                    guard self.hosts[host].running < self.maximumPerHost, self.hosts[host].holds == 0 else {
                        position += 1
                        continue
                    }
                    // A queue left with only stale entries leaves the list: the next host is now at `position`.
                    guard let head = self.liveHead(of: host) else { continue }
                    if best == nil || head < best!.entry { best = (host, head) }
                    position += 1
                }
                guard let (host, entry) = best else { break }
                self.hosts[host].queue.removeMin()
                if self.hosts[host].queue.isEmpty { self.removeFromHostsWithQueue(host) }
                self.waiting[entry.id] = nil
                self.running[entry.id] = host
                self.hosts[host].running += 1
                started.append(entry.id)
            }
            return started
        }

        /// The first entry of a host's queue that is still waiting, dropping stale ones; a queue left empty leaves
        /// ``hostsWithQueue``, and a host left idle is forgotten.
        private mutating func liveHead(of host: Int) -> Entry? {
            while let head = self.hosts[host].queue.min {
                if let live = self.waiting[head.id], live.sequence == head.sequence, live.priority == head.priority {
                    return head
                }
                self.hosts[host].queue.removeMin()
            }
            self.removeFromHostsWithQueue(host)
            self.forgetIfIdle(host)
            return nil
        }

        /// The number of a host, given to it now if it has none.
        private mutating func number(of name: String) -> Int {
            if let number = self.hostNumbers[name] { return number }
            let number: Int
            if let free = self.freeHostNumbers.popLast() {
                number = free
                self.hosts[number] = Host(name: name)
            } else {
                number = self.hosts.count
                self.hosts.append(Host(name: name))
            }
            self.hostNumbers[name] = number
            return number
        }

        private mutating func insert(_ entry: Entry, into host: Int) {
            self.hosts[host].queue.insert(entry)
            if self.hosts[host].queuePosition == nil {
                self.hosts[host].queuePosition = self.hostsWithQueue.count
                self.hostsWithQueue.append(host)
            }
        }

        private mutating func removeFromHostsWithQueue(_ host: Int) {
            guard let position = self.hosts[host].queuePosition else { return }
            let last = self.hostsWithQueue.removeLast()
            if last != host {
                self.hostsWithQueue[position] = last
                self.hosts[last].queuePosition = position
            }
            self.hosts[host].queuePosition = nil
        }

        /// Forgets a host with nothing queued, running or held, so that the scheduler's memory follows the hosts in
        /// use, not every host ever seen.
        private mutating func forgetIfIdle(_ host: Int) {
            let state = self.hosts[host]
            guard state.isTracked, state.queuePosition == nil, state.running == 0, state.holds == 0 else { return }
            self.hostNumbers[state.name] = nil
            self.hosts[host] = Host(name: "")
            self.hosts[host].isTracked = false
            self.freeHostNumbers.append(host)
        }
    }
}
