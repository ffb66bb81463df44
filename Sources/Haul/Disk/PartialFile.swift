import CHaulSystem
import Foundation
import NIOConcurrencyHelpers
import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A download's temporary file: written at explicit offsets in batches, then moved into place.
///
/// It is opened without following a symbolic link at its own path, so a link planted where the `.part` file goes
/// cannot redirect the write. Writes are gathered to ``batchSize`` (256 KiB) before they reach the kernel, with one
/// `pwritev` of the HTTP client's own buffers: fewer, larger writes, and no copy.
///
/// On Linux, a new file of known length up to ``unnamedLimit`` may be made without a name
/// (``init(unnamedIn:partPath:)``) and named once, when it is published: one directory change per file instead of two.
/// An attempt that ends before publishing names it at ``path`` (``nameAtPartPath()``), so a retry in the same process
/// resumes from it as usual; a killed process loses it. Who decides:
/// ``TransferManager/Configuration/writesSmallFilesUnnamed``.
package struct PartialFile: ~Copyable {
    /// The largest file made without a name: what a killed process may lose of each file it was downloading.
    package static let unnamedLimit: Int64 = 1 << 20
    /// The most files without a name open at once in the process (each keeps its descriptor until it is published);
    /// past it, new files get their `.part` name at once.
    static let maximumUnnamed = 256
    /// How many bytes are gathered before one write.
    static let batchSize = 256 * 1024
    /// The most buffers one write takes (Linux and Darwin accept 1,024).
    static let maximumBuffers = 64
    /// The most memory the gathered buffers may keep alive: a small body part can sit in a large read buffer, and
    /// holding that buffer holds all of it.
    static let maximumHeldStorage = 2 * batchSize

    /// The `.part` file's path: where the file is, or, for one without a name yet, where an unfinished attempt
    /// leaves it.
    let path: String
    private let descriptor: Int32
    /// Whether the file has no name yet (see ``init(unnamedIn:partPath:)``).
    package private(set) var isUnnamed: Bool
    /// Whether it was opened without a name (it counts among ``maximumUnnamed`` until it is closed).
    private let wasOpenedUnnamed: Bool
    /// Received, not yet written, in order.
    private var pending: [ByteBuffer] = []
    private var pendingBytes = 0
    private var heldStorage = 0
    /// Where the next byte goes, counting those still in the batch.
    package private(set) var size: Int64

    /// Opens (creating it, with its folders) the partial file at `path`; its current size is where writing resumes.
    /// Anything there but a regular file (a link, a folder, a FIFO) is refused and left alone: the open does not
    /// follow a link, does not wait for a FIFO's reader, and what it opened is checked.
    package init(openingAt path: String) throws(HaulError) {
        let flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
        var descriptor = open(path, flags, 0o644)
        if descriptor < 0, errno == ENOENT {
            // The folder is missing: create it (and its parents) once, then open again. Not done up front: a
            // batch opens thousands of files in folders that exist, and each check is a system call.
            try Folders.make(URL(filePath: path).deletingLastPathComponent().path)
            descriptor = open(path, flags, 0o644)
        }
        guard descriptor >= 0 else { throw .posix("Cannot open \(path)") }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            let error = HaulError.posix("Cannot read the size of \(path)")
            close(descriptor)
            throw error
        }
        guard (status.st_mode & S_IFMT) == S_IFREG else {
            close(descriptor)
            throw HaulError(.fileSystem, "\(path) is not a regular file; it is left alone")
        }
        self.path = path
        self.descriptor = descriptor
        self.size = Int64(status.st_size)
        self.isUnnamed = false
        self.wasOpenedUnnamed = false
        PartFileNames.shared.made(path)
    }

    /// Opens a new, empty file without a name in `folder` (created with its parents when missing), whose `.part`
    /// name would be `partPath`; `nil` where that cannot be done (not Linux, a file system without `O_TMPFILE`, no
    /// `/proc`, or ``maximumUnnamed`` open already): the caller then opens the `.part` file.
    package init?(unnamedIn folder: String, partPath: String) {
        guard Self.unnamedFiles.reserve() else { return nil }
        var descriptor = haul_open_unnamed(folder, 0o644)
        if descriptor < 0, errno == ENOENT, (try? Folders.make(folder)) != nil {
            descriptor = haul_open_unnamed(folder, 0o644)
        }
        guard descriptor >= 0 else {
            if errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL { Self.unnamedFiles.disable() }
            Self.unnamedFiles.release()
            return nil
        }
        self.path = partPath
        self.descriptor = descriptor
        self.size = 0
        self.isUnnamed = true
        self.wasOpenedUnnamed = true
    }

    /// Reserves the disk blocks for the rest of a file of `length` bytes, from what it holds now, without changing its
    /// size (what it holds is still where a resumed attempt starts); best effort, save a lack of room (below). Only
    /// for at least ``reservationMinimum`` bytes more, and not on tmpfs (where reserving allocates and zeroes pages).
    /// Large files then get their blocks in one call instead of one per page written.
    ///
    /// A file larger than the room left on its file system fails here, before its body is received, rather than
    /// after it has filled the disk.
    /// - Returns: whether the blocks are reserved.
    @discardableResult
    package func reserve(toLength length: Int64) throws(HaulError) -> Bool {
        guard length - self.size >= Self.reservationMinimum else { return false }
        if haul_reserve_space(self.descriptor, self.size, length - self.size) == 0 { return true }
        guard errno == ENOSPC || errno == EDQUOT else { return false }
        throw HaulError(
            .fileSystem,
            "Not enough room left on the disk for \(self.path): the server announced \(length) bytes"
        )
    }

    /// The least a file must have left to receive for ``reserve(toLength:)`` to reserve it: one write's worth.
    static let reservationMinimum = Int64(batchSize)

    deinit {
        close(self.descriptor)
        if self.wasOpenedUnnamed { Self.unnamedFiles.release() }
    }

    /// Gives a file without a name its `.part` name, with what is gathered written first, so that what the attempt
    /// received outlives it (a retry resumes from it; a cancel removes it as usual). Nothing to do for a named file.
    package mutating func nameAtPartPath() throws(HaulError) {
        guard self.isUnnamed else { return }
        try self.flush()
        if haul_link_descriptor(self.descriptor, self.path) != 0 {
            // A `.part` file left there by an earlier process holds nothing this one can resume from.
            guard errno == EEXIST, unlink(self.path) == 0 || errno == ENOENT,
                haul_link_descriptor(self.descriptor, self.path) == 0
            else { throw .posix("Cannot name the file \(self.path)") }
        }
        self.isUnnamed = false
        PartFileNames.shared.made(self.path)
    }

    /// Gives the finished file the name `target` without replacing anything: `false` when `target` exists.
    package mutating func publishWithoutReplacing(at target: String) throws(HaulError) -> Bool {
        guard self.isUnnamed else { return try Self.publishWithoutReplacing(self.path, at: target) }
        guard haul_link_descriptor(self.descriptor, target) == 0 else {
            if errno == EEXIST { return false }
            // Not for this file system, or not allowed here: the next files get their `.part` names at once.
            Self.unnamedFiles.disable()
            throw .posix("Cannot name the file \(target)")
        }
        self.isUnnamed = false
        return true
    }

    /// Gives the finished file the name `target`, replacing what is there atomically.
    package mutating func publishReplacing(at target: String) throws(HaulError) {
        try self.nameAtPartPath()
        try Self.publishReplacing(self.path, at: target)
    }

    /// Removes the file: its `.part` name, or nothing for a file without a name (it vanishes when closed).
    package mutating func discard() {
        if !self.isUnnamed { Self.remove(self.path) }
        self.isUnnamed = false
    }

    /// Appends bytes at the end; they reach the file when the batch is full or on ``flush()``.
    package mutating func append(_ buffer: ByteBuffer) throws(HaulError) {
        let count = buffer.readableBytes
        guard count > 0 else { return }
        self.pending.append(buffer)
        self.pendingBytes += count
        self.heldStorage += buffer.storageCapacity
        self.size += Int64(count)
        if self.pendingBytes >= Self.batchSize || self.heldStorage >= Self.maximumHeldStorage
            || self.pending.count >= Self.maximumBuffers
        {
            try self.flush()
        }
    }

    /// Writes the gathered bytes.
    package mutating func flush() throws(HaulError) {
        guard !self.pending.isEmpty else { return }
        let offset = self.size - Int64(self.pendingBytes)
        let (descriptor, total) = (self.descriptor, self.pendingBytes)
        let result = Self.withIOVectors(self.pending) { vectors in
            Self.writeAll(descriptor, &vectors, at: offset, total: total)
        }
        guard result == 0 else {
            errno = result
            throw .posix("Cannot write to \(self.path)")
        }
        self.pending.removeAll(keepingCapacity: true)
        self.pendingBytes = 0
        self.heldStorage = 0
    }

    /// Empties the file, to write it again from its first byte (what is gathered and not yet written is dropped).
    package mutating func startOver() throws(HaulError) {
        guard ftruncate(self.descriptor, 0) == 0 else { throw .posix("Cannot empty \(self.path)") }
        self.pending.removeAll()
        self.pendingBytes = 0
        self.heldStorage = 0
        self.size = 0
    }

    /// The file's modification time in seconds since 1970 (nanoseconds kept), read from the open file: a rename keeps
    /// it, and reading it here spares a lookup of the path.
    func modificationTime() -> Double? {
        var status = stat()
        guard fstat(self.descriptor, &status) == 0 else { return nil }
        return status.modificationTime
    }

    /// Forces the written bytes to stable storage.
    func synchronize() throws(HaulError) {
        guard fsync(self.descriptor) == 0 else { throw .posix("Cannot sync \(self.path)") }
    }

    /// Calls `body` with an `iovec` per buffer, each pointing into its buffer's readable bytes (valid in `body`).
    private static func withIOVectors<Result>(
        _ buffers: [ByteBuffer],
        _ body: (inout [iovec]) -> Result
    ) -> Result {
        var vectors: [iovec] = []
        vectors.reserveCapacity(buffers.count)
        func nest(_ index: Int) -> Result {
            guard index < buffers.count else { return body(&vectors) }
            return buffers[index].withUnsafeReadableBytes { bytes in
                vectors.append(
                    iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)
                )
                return nest(index + 1)
            }
        }
        return nest(0)
    }

    /// Writes `total` bytes from `vectors` at `offset`, going on after short writes and interruptions. Returns 0 or
    /// the `errno` of the failure.
    private static func writeAll(_ descriptor: Int32, _ vectors: inout [iovec], at offset: Int64, total: Int) -> Int32 {
        var written = 0
        var first = 0
        while written < total {
            let count = vectors.withUnsafeBufferPointer { all in
                pwritev(descriptor, all.baseAddress! + first, Int32(all.count - first), off_t(offset) + off_t(written))
            }
            if count < 0 {
                if errno == EINTR { continue }
                return errno
            }
            guard count > 0 else { return EIO }
            written += count
            // Skip what was written: whole vectors, then the front of a partly written one.
            var left = count
            while first < vectors.count, left >= vectors[first].iov_len {
                left -= vectors[first].iov_len
                first += 1
            }
            if left > 0 {
                vectors[first].iov_base += left
                vectors[first].iov_len -= left
            }
        }
        return 0
    }
}

extension PartialFile {
    /// How many files without a name are open, and whether they can be made at all.
    static let unnamedFiles = UnnamedFiles()

    final class UnnamedFiles: Sendable {
        private let state: NIOLockedValueBox<(open: Int, isAvailable: Bool)>

        init() {
            #if os(Linux)
            // Naming a file by its descriptor needs Linux 6.10 or later, or /proc on earlier kernels
            // (haul_link_descriptor): without /proc, none are made.
            let isAvailable = access("/proc/self/fd", F_OK) == 0
            #else
            let isAvailable = false
            #endif
            self.state = NIOLockedValueBox((0, isAvailable))
        }

        /// Counts one more, when below ``PartialFile/maximumUnnamed`` and available.
        func reserve() -> Bool {
            self.state.withLockedValue { state in
                guard state.isAvailable, state.open < PartialFile.maximumUnnamed else { return false }
                state.open += 1
                return true
            }
        }

        func release() {
            self.state.withLockedValue { $0.open -= 1 }
        }

        /// No more files without a name in this process (a file system or a system that cannot name them).
        func disable() {
            self.state.withLockedValue { $0.isAvailable = false }
        }
    }

    /// Feeds the first `count` bytes already on disk to `body`, in chunks, to hash a resumed file from its start.
    static func read(_ path: String, upTo count: Int64, _ body: (UnsafeRawBufferPointer) -> Void) throws(HaulError) {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else { throw .posix("Cannot open \(path)") }
        defer { close(descriptor) }
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: PartialFile.batchSize, alignment: 16)
        defer { chunk.deallocate() }
        var offset: Int64 = 0
        while offset < count {
            let wanted = Int(min(Int64(chunk.count), count - offset))
            let got = pread(descriptor, chunk.baseAddress!, wanted, off_t(offset))
            if got < 0, errno == EINTR { continue }
            guard got > 0 else { throw .posix("Cannot read \(path)") }
            body(UnsafeRawBufferPointer(rebasing: chunk[..<got]))
            offset += Int64(got)
        }
    }

    /// Moves a finished file into place without replacing anything: `false` when `target` exists.
    static func publishWithoutReplacing(_ source: String, at target: String) throws(HaulError) -> Bool {
        // One atomic call where the system has it (renameat2 / renamex_np).
        if haul_rename_noreplace(source, target) == 0 {
            PartFileNames.shared.gone(source)
            return true
        }
        if errno == EEXIST { return false }
        guard errno == ENOTSUP else { throw .posix("Cannot move \(source) to \(target)") }
        // Else link(2), which fails with EEXIST instead of replacing, atomically, on every POSIX file system.
        if link(source, target) == 0 {
            Self.remove(source)
            return true
        }
        if errno == EEXIST { return false }
        if errno == ENOTSUP || errno == EPERM || errno == EXDEV {
            // File systems without hard links: check, then rename (a narrow race, documented).
            if FileManager.default.fileExists(atPath: target) { return false }
            return try self.publishReplacing(source, at: target)
        }
        throw .posix("Cannot move \(source) to \(target)")
    }

    /// Moves a finished file into place, replacing what is there atomically.
    @discardableResult
    static func publishReplacing(_ source: String, at target: String) throws(HaulError) -> Bool {
        guard rename(source, target) == 0 else {
            throw .posix("Cannot move \(source) to \(target)")
        }
        PartFileNames.shared.gone(source)
        return true
    }

    /// Removes a file if it exists.
    package static func remove(_ path: String) {
        unlink(path)
        PartFileNames.shared.gone(path)
    }

    /// The size of the file at `path`, 0 when there is none; an error when it is not a regular file (a symbolic
    /// link planted at a partial file's path is refused, never followed).
    static func size(of path: String) throws(HaulError) -> Int64 {
        var status = stat()
        guard lstat(path, &status) == 0 else {
            if errno == ENOENT { return 0 }
            throw .posix("Cannot read \(path)")
        }
        guard (status.st_mode & S_IFMT) == S_IFREG else {
            throw HaulError(.fileSystem, "\(path) is not a regular file; it is left alone")
        }
        return Int64(status.st_size)
    }

    /// Whether a regular file is at `path`: `false` when nothing is; an error when something else is (a symbolic link
    /// planted at a partial file's path is refused, never followed or removed).
    static func regularFileExists(at path: String) throws(HaulError) -> Bool {
        var status = stat()
        guard lstat(path, &status) == 0 else {
            if errno == ENOENT { return false }
            throw .posix("Cannot read \(path)")
        }
        guard (status.st_mode & S_IFMT) == S_IFREG else {
            throw HaulError(.fileSystem, "\(path) is not a regular file; it is left alone")
        }
        return true
    }

    /// Whether anything (a file, a folder, a link) is at `path`.
    static func exists(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0
    }
}

extension HaulError {
    /// A file-system error carrying the current `errno` in words.
    static func posix(_ message: String) -> HaulError {
        let code = errno
        let reason = String(cString: strerror(code))
        return HaulError(
            .fileSystem,
            "\(message): \(reason)",
            underlying: POSIXErrorCode(rawValue: code).map { POSIXError($0) }
        )
    }
}
