import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A local file read for an upload: opened once, read at explicit offsets, closed when the last reference goes.
final class SourceFile: Sendable {
    let path: String
    /// The size and modification time when it was opened: the upload sends exactly that many bytes.
    let size: Int64
    let modificationTime: Double
    private let descriptor: Int32

    /// Opens a regular file for reading (not following a symbolic link at the last component would refuse legitimate
    /// uploads of linked files, so links are followed here: reading is not writing).
    init(path: String) throws(HaulError) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .posix("Cannot open \(path) for upload") }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            close(descriptor)
            throw .posix("Cannot read \(path)")
        }
        guard (status.st_mode & S_IFMT) == S_IFREG else {
            close(descriptor)
            throw HaulError(.fileSystem, "\(path) is not a regular file")
        }
        #if canImport(Darwin)
        let modified = Double(status.st_mtimespec.tv_sec) + Double(status.st_mtimespec.tv_nsec) / 1e9
        #else
        let modified = Double(status.st_mtim.tv_sec) + Double(status.st_mtim.tv_nsec) / 1e9
        #endif
        self.path = path
        self.descriptor = descriptor
        self.size = Int64(status.st_size)
        self.modificationTime = modified
    }

    deinit { close(self.descriptor) }

    /// Reads up to `count` bytes at `offset` into `buffer`; throws when the file ends early (it shrank).
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(HaulError) -> Int {
        while true {
            let got = pread(self.descriptor, buffer.baseAddress!, buffer.count, off_t(offset))
            if got < 0, errno == EINTR { continue }
            guard got >= 0 else { throw .posix("Cannot read \(self.path)") }
            guard got > 0 else {
                throw HaulError(.fileSystem, "\(self.path) became shorter while it was being uploaded")
            }
            return got
        }
    }
}
