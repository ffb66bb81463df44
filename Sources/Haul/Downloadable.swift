import Foundation

/// An app model that has a file to download (BNDownload's downloadable items): a podcast episode, a map tile, a
/// document. Conform with two properties; ``isDownloaded(in:)``, ``isDownloading(in:)``, ``download(with:)`` and
/// ``remove(from:)`` come with the protocol, implemented once on top of ``TransferManager``.
///
/// ```swift
/// struct Episode: Downloadable {
///     var audioURL: URL
///     var downloadURL: URL { audioURL }
///     var localFileURL: URL { episodesFolder.appending(path: audioURL.lastPathComponent) }
/// }
/// if !episode.isDownloaded(in: manager) { try episode.download(with: manager) }
/// ```
public protocol Downloadable: Sendable {
    /// Where the file comes from (`http` or `https`).
    var downloadURL: URL { get }
    /// Where the downloaded file lives: exactly this path.
    var localFileURL: URL { get }
}

extension Downloadable {
    /// The request for the model's file: into ``localFileURL``, skipped when the file is already there.
    public var transferRequest: TransferRequest {
        TransferRequest(url: self.downloadURL, destination: .file(self.localFileURL), conflictPolicy: .skip)
    }

    /// The transfer's identifier, the same in every manager and after a restart.
    public var transferID: TransferID { self.transferRequest.id }

    /// Whether the file is at ``localFileURL`` and no transfer of it is under way (waiting, running or paused).
    public func isDownloaded(in manager: TransferManager) -> Bool {
        !self.isDownloading(in: manager) && FileManager.default.fileExists(atPath: self.localFileURL.path)
    }

    /// Whether a transfer of the file is waiting, running, waiting to retry, or paused.
    public func isDownloading(in manager: TransferManager) -> Bool {
        guard let state = manager.state(of: self.transferID) else { return false }
        return state.isActive || state == .paused
    }

    /// Starts downloading the file (or joins the transfer already under way); the batch reports its result. A file
    /// already at ``localFileURL`` is not downloaded again (the result is ``TransferResult/skipped(existing:)``).
    @discardableResult
    public func download(with manager: TransferManager) throws -> Batch {
        try manager.enqueue(self.transferRequest)
    }

    /// Cancels the transfer if it is under way, and deletes the local file if there is one.
    public func remove(from manager: TransferManager) throws {
        manager.cancel(self.transferID)
        do {
            try FileManager.default.removeItem(at: self.localFileURL)
        } catch CocoaError.fileNoSuchFile {
            return
        } catch {
            throw HaulError(.fileSystem, "Cannot delete \(self.localFileURL.path): \(error)", underlying: error)
        }
    }
}
