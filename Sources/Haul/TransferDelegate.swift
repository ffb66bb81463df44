import Foundation

/// An object that hears about transfers, one method per kind of event (BNDownload's and DownloadManager's
/// delegates), for callers who prefer one object to a stream or closures.
///
/// Register it with ``TransferManager/addDelegate(_:for:)``. Its methods are called in the order the events happened,
/// one at a time (never concurrently), from a task of the manager's scope; every method has an empty default, so
/// implement only those you need. A slow delegate does not slow the transfers: progress is coalesced while it works.
public protocol TransferDelegate: Sendable {
    /// A request was sent; `offset` is where the body continues (0 for a fresh start).
    func transferDidStart(_ id: TransferID, url: URL, offset: Int64) async
    /// More bytes moved.
    func transferDidProgress(_ id: TransferID, url: URL, progress: TransferProgress) async
    /// The transfer was paused.
    func transferDidPause(_ id: TransferID, url: URL) async
    /// A paused transfer was resumed and waits for a slot.
    func transferDidResume(_ id: TransferID, url: URL) async
    /// An attempt failed transiently; the next one starts after `delay`.
    func transferWillRetry(_ id: TransferID, url: URL, attempt: Int, delay: Duration, error: HaulError) async
    /// The transfer completed (or was skipped: the file was already there).
    func transferDidComplete(_ id: TransferID, url: URL, file: CompletedFile) async
    /// The transfer failed.
    func transferDidFail(_ id: TransferID, url: URL, error: HaulError) async
    /// The transfer was cancelled.
    func transferDidCancel(_ id: TransferID, url: URL) async
}

extension TransferDelegate {
    public func transferDidStart(_ id: TransferID, url: URL, offset: Int64) async {}
    public func transferDidProgress(_ id: TransferID, url: URL, progress: TransferProgress) async {}
    public func transferDidPause(_ id: TransferID, url: URL) async {}
    public func transferDidResume(_ id: TransferID, url: URL) async {}
    public func transferWillRetry(_ id: TransferID, url: URL, attempt: Int, delay: Duration, error: HaulError) async {}
    public func transferDidComplete(_ id: TransferID, url: URL, file: CompletedFile) async {}
    public func transferDidFail(_ id: TransferID, url: URL, error: HaulError) async {}
    public func transferDidCancel(_ id: TransferID, url: URL) async {}

    /// Calls the method for an event.
    func handle(_ event: TransferEvent) async {
        switch event.kind {
        case .started(let offset): await self.transferDidStart(event.id, url: event.url, offset: offset)
        case .progressed(let progress): await self.transferDidProgress(event.id, url: event.url, progress: progress)
        case .paused: await self.transferDidPause(event.id, url: event.url)
        case .resumed: await self.transferDidResume(event.id, url: event.url)
        case .retrying(let attempt, let delay, let error):
            await self.transferWillRetry(event.id, url: event.url, attempt: attempt, delay: delay, error: error)
        case .finished(.completed(let file)): await self.transferDidComplete(event.id, url: event.url, file: file)
        case .finished(.skipped(let existing)):
            await self.transferDidComplete(event.id, url: event.url, file: CompletedFile(skipped: existing))
        case .finished(.failed(let error)): await self.transferDidFail(event.id, url: event.url, error: error)
        case .finished(.cancelled): await self.transferDidCancel(event.id, url: event.url)
        case .queued, .restarted: break
        }
    }
}

extension CompletedFile {
    /// The file kept in place of a skipped download.
    init(skipped existing: URL) {
        let size = Persisted.sizeAndModification(existing.path)
        self.init(path: existing, byteCount: size?.0 ?? 0, sha256: nil, modificationTime: size?.1)
    }
}
