import AsyncHTTPClient
import CHaulSystem
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Tracing

extension TransferManager: Download.Observer {
    // Progress is not pushed by the attempt: the manager samples each attempt's `ProgressCell`.
    func attemptStarted(_ id: TransferID, offset: Int64) {
        self.core.withLockedValue { $0.attemptStarted(id, offset: offset) }
    }

    func responseAccepted(_ id: TransferID, validator: Download.Validator, expectedBytes: Int64?, receivedBytes: Int64)
    {
        self.core.withLockedValue {
            $0.responseAccepted(id, validator: validator, expectedBytes: expectedBytes, receivedBytes: receivedBytes)
        }
    }

    func restarted(_ id: TransferID, reason: String) {
        self.core.withLockedValue { $0.restarted(id, reason: reason) }
    }

    func leftNetwork(_ id: TransferID) -> Bool {
        self.withCore { $0.leftNetwork(id, aftermath: &$1) }
    }

    var recordsPublications: Bool { self.storeWriter != nil }

    func willPublish(
        _ id: TransferID,
        at path: String,
        byteCount: Int64,
        sha256: String?,
        modificationTime: Double?,
        lingering: Bool,
        then recorded: @escaping @Sendable () -> Void
    ) {
        // Written before `recorded` is called, outside the lock, with everything queued before it: the record must be
        // in the database before the rename, or a process killed right after the rename would download the file
        // again under another name. Nothing waits or blocks while the database works: `recorded` runs from the
        // commit, on an event loop (this one, or the loop that renames the other files of the same commit).
        // It waits for others to share its commit only while other transfers are still on the network (`lingering`,
        // read as it left the network, in that turn of the lock): the last files of a batch have no one to wait for.
        // Without a store there is nothing to record: the rename runs now, unless another is running (on another
        // loop): then after it, on that loop (see ``OneAtATime``).
        guard let storeWriter = self.storeWriter else { return self.renames.run(recorded) }
        let loop = MultiThreadedEventLoopGroup.currentEventLoop ?? self.transport.client.eventLoopGroup.any()
        storeWriter.flush(
            adding: .publishing(id, finalPath: path, size: byteCount, sha256: sha256, modified: modificationTime),
            lingering: lingering,
            on: loop,
            then: recorded
        )
    }

}

extension TransferManager {
    /// Grows the process's table of file descriptors to hold `count` of them now, for programs that own their process
    /// (the `haul` command calls it first thing in `main`): call it before the program starts its first thread.
    ///
    /// Linux grows the table by doubling it when a descriptor past its end is opened; in a process with several threads,
    /// each doubling waits for an RCU grace period, and the thread opening the descriptor waits with it. A batch may pass
    /// 64 and 128 descriptors at once (connections, files being written, files waiting for their completion's commit).
    /// Nothing else changes; the slots cost a few KiB.
    ///
    /// - Returns: how many slots were reserved (fewer than `count` when the descriptor limit is lower), or `nil`.
    @discardableResult
    public static func reserveFileDescriptors(_ count: Int = 1024) -> Int? {
        let reserved = haul_reserve_descriptors(Int32(clamping: count))
        return reserved < 0 ? nil : Int(reserved)
    }

    /// Starts the event loops that managers share (SwiftNIO's, or Network.framework's on Apple platforms) in the
    /// background, and returns at once: a program that will soon make a manager calls it early (the `haul` command,
    /// before it parses its arguments), so that the manager does not wait for the loops' threads to start. Calling it
    /// again does nothing more.
    public static func startEventLoops() {
        Task.detached(priority: .high) { _ = HTTPClient.defaultEventLoopGroup }
    }
}
