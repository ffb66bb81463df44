import Foundation

/// A registered observer, to remove it with ``TransferManager/removeObserver(_:)``.
public struct ObserverToken: Hashable, Sendable {
    let rawValue: Int
}

extension TransferManager {
    /// Adds an observer of one transfer's events, or (with `nil`) of every transfer's, from now until it is removed
    /// or the manager's scope ends.
    ///
    /// The handler is called with each event in the order they happened, one at a time (never concurrently), from a
    /// task of the manager's scope. It never slows the transfers: while it works, later progress events of a transfer
    /// replace earlier ones that it has not seen yet, and lifecycle events (started, paused, resumed, retrying,
    /// finished) are all kept. Events still queued when the scope ends are delivered before
    /// ``withTransferManager(configuration:_:)`` returns.
    @discardableResult
    public func addObserver(
        for id: TransferID? = nil,
        _ handler: @escaping @Sendable (TransferEvent) async -> Void
    ) -> ObserverToken {
        self.register(ObserverMailbox(transfer: id, endsWhenFinished: false, handler: handler))
    }

    /// Adds a delegate for one transfer's events, or (with `nil`) for every transfer's; see
    /// ``addObserver(for:_:)`` for the order and speed guarantees.
    @discardableResult
    public func addDelegate(_ delegate: some TransferDelegate, for id: TransferID? = nil) -> ObserverToken {
        self.addObserver(for: id) { await delegate.handle($0) }
    }

    /// Removes an observer or a delegate: it is called no more, and events queued for it are dropped.
    public func removeObserver(_ token: ObserverToken) {
        let mailbox = self.core.withLockedValue { $0.observers.removeValue(forKey: token.rawValue) }
        mailbox?.cancel()
    }

    /// Submits one request as a batch of its own, with closures for its progress and its end (BNDownload's and
    /// DownloadManager's per-download blocks).
    ///
    /// - Parameters:
    ///   - onProgress: called with the transfer's progress (coalesced while the closure works).
    ///   - onSuccess: called once when it completes (or is skipped because the file is already there).
    ///   - onFailure: called once when it fails or is cancelled (with ``HaulError/Code/cancelled``).
    @discardableResult
    public func enqueue(
        _ request: TransferRequest,
        onProgress: (@Sendable (TransferProgress) async -> Void)? = nil,
        onSuccess: @escaping @Sendable (CompletedFile) async -> Void,
        onFailure: @escaping @Sendable (HaulError) async -> Void
    ) throws -> Batch {
        let mailbox = ObserverMailbox(transfer: request.id, endsWhenFinished: true) { event in
            switch event.kind {
            case .progressed(let progress): await onProgress?(progress)
            case .finished(.completed(let file)): await onSuccess(file)
            case .finished(.skipped(let existing)): await onSuccess(CompletedFile(skipped: existing))
            case .finished(.failed(let error)): await onFailure(error)
            case .finished(.cancelled): await onFailure(HaulError(.cancelled, "The transfer was cancelled"))
            default: break
            }
        }
        _ = self.register(mailbox)
        return try self.enqueue(request)
    }

    private func register(_ mailbox: ObserverMailbox) -> ObserverToken {
        let key = self.core.withLockedValue { core -> Int? in
            guard !core.isShutDown else { return nil }
            let key = core.nextSubscriberID
            core.nextSubscriberID += 1
            core.observers.insert(mailbox, forKey: key)
            core.deliveries.yield(mailbox)
            return key
        }
        guard let key else {
            mailbox.close()
            return ObserverToken(rawValue: -1)
        }
        return ObserverToken(rawValue: key)
    }

    /// Delivers every observer's events, each in a task of its own, until the manager's scope ends.
    func deliverObservedEvents(_ deliveries: AsyncStream<ObserverMailbox>) async {
        await withDiscardingTaskGroup { group in
            for await mailbox in deliveries {
                group.addTask { await mailbox.deliver() }
            }
        }
    }
}
