import DequeModule
import NIOConcurrencyHelpers

/// The queue between the manager and one observer: the manager posts without ever waiting, and one task delivers
/// the events to the observer in order, one at a time.
///
/// A slow observer never slows a transfer: progress events of a transfer coalesce (a newer one replaces the pending
/// one when nothing of that transfer was queued after it), so the queue holds at most one progress event per
/// transfer plus its few lifecycle events, whatever the observer's speed.
final class ObserverMailbox: Sendable {
    private struct State: Sendable {
        var queue: Deque<TransferEvent> = []
        /// How many events were taken from the queue: absolute indices are `popped + position`.
        var popped = 0
        /// The absolute index of each transfer's last queued event, and whether it is a progress event.
        var last: [TransferID: (index: Int, isProgress: Bool)] = [:]
        var waiter: CheckedContinuation<TransferEvent?, Never>?
        /// No more events will be posted; the queue is delivered, then the delivery ends.
        var isClosed = false
    }

    /// The transfer observed, or `nil` for all.
    let transfer: TransferID?
    /// Whether the observer ends after its transfer's `finished` event (closures given at submission).
    let endsWhenFinished: Bool
    private let handler: @Sendable (TransferEvent) async -> Void
    private let state = NIOLockedValueBox(State())

    init(transfer: TransferID?, endsWhenFinished: Bool, handler: @escaping @Sendable (TransferEvent) async -> Void) {
        self.transfer = transfer
        self.endsWhenFinished = endsWhenFinished
        self.handler = handler
    }

    /// Queues an event; never waits.
    func post(_ event: TransferEvent) {
        let waiter = self.state.withLockedValue { state -> CheckedContinuation<TransferEvent?, Never>? in
            guard !state.isClosed else { return nil }
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            let isProgress = if case .progressed = event.kind { true } else { false }
            if isProgress, let last = state.last[event.id], last.isProgress, last.index >= state.popped {
                state.queue[last.index - state.popped] = event
                return nil
            }
            state.queue.append(event)
            state.last[event.id] = (state.popped + state.queue.count - 1, isProgress)
            return nil
        }
        waiter?.resume(returning: event)
    }

    /// No more events: what is queued is still delivered.
    func close() {
        let waiter = self.state.withLockedValue { state -> CheckedContinuation<TransferEvent?, Never>? in
            state.isClosed = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// Stops at once: what is queued is dropped (the observer was removed).
    func cancel() {
        let waiter = self.state.withLockedValue { state -> CheckedContinuation<TransferEvent?, Never>? in
            state.isClosed = true
            state.queue.removeAll()
            state.last.removeAll()
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// Delivers events until the mailbox is closed and empty.
    func deliver() async {
        while let event = await self.next() { await self.handler(event) }
    }

    private func next() async -> TransferEvent? {
        await withCheckedContinuation { continuation in
            let event = self.state.withLockedValue { state -> TransferEvent?? in
                if let event = state.queue.popFirst() {
                    if state.last[event.id]?.index == state.popped { state.last[event.id] = nil }
                    state.popped += 1
                    return .some(event)
                }
                if state.isClosed { return .some(nil) }
                state.waiter = continuation
                return nil
            }
            if let event { continuation.resume(returning: event) }
        }
    }
}
