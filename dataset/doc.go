// Package dataset reads image-classification datasets that users already have
// on disk, in the layouts the CLIP few-shot literature uses (CoOp split files,
// CIFAR binary and Python versions, FedBN's DomainNet / Office-Caltech10
// subsets, ImageFolder trees and Fashion-MNIST IDX files), into one in-memory
// description: a [Dataset] of [Item] values whose images load lazily.
//
// Every loader takes the DATA root shared by all tools and reads in place:
//
//	caltech101        DATA/caltech-101/101_ObjectCategories + split_zhou_Caltech101.json
//	oxford_pets       DATA/oxford_pets/images + split_zhou_OxfordPets.json
//	oxford_flowers    DATA/oxford_flowers/jpg + split_zhou_OxfordFlowers.json
//	food101           DATA/food-101/images + split_zhou_Food101.json
//	dtd               DATA/dtd/images + split_zhou_DescribableTextures.json
//	sun397            DATA/sun397/SUN397 (or DATA/SUN397/SUN397) + split_zhou_SUN397.json
//	ucf101            DATA/ucf101/UCF-101-midframes + split_zhou_UCF101.json
//	cifar10           DATA/cifar-10-batches-bin or DATA/cifar-10-batches-py
//	cifar100          DATA/cifar-100-binary or DATA/cifar-100-python
//	domainnet         DATA/DomainNet/{site}_{train,test}.{tsv,csv,txt,pkl}
//	office_caltech10  DATA/office_caltech_10/{site}_{train,test}.{tsv,csv,txt,pkl}
//	imagefolder       root/class/*.jpg, or root/{train,val,test}/class/*.jpg
//	fashion_mnist     {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] under
//	                  root/fashion-mnist or root; an empty root means
//	                  /usr/share/datasets/fashion-mnist
//
// # CoOp split files
//
// The split_zhou_*.json file is the source of truth. When it is missing, a
// split is generated the way CoOp does (per class 50% train, 20% val, 30%
// test, counts rounded half to even as in Python, shuffled with
// [Options.Seed]) and written next to the images in the same JSON format.
// OxfordPets is regenerated from annotations/{trainval,test}.txt; Flowers102
// needs its split file (its labels live in a MATLAB file).
//
// # FedBN subsets (DomainNet, Office-Caltech10)
//
// FedBN ships each site as a numpy-pickled pair (image paths relative to
// DATA, text labels). Those .pkl files are read directly (numpy arrays of str,
// bytes or objects, pickle protocols 2–5). A plain list file is preferred when
// present, one "relative/path<TAB>class_name" per line (.tsv), comma separated
// (.csv) or whitespace separated with the class name last (.txt). To convert a
// pickle by hand:
//
//	python3 -c "import numpy as np,sys; p,l=np.load(sys.argv[1],allow_pickle=True); open(sys.argv[2],'w').writelines(f'{a}\t{b}\n' for a,b in zip(p,l))" clipart_train.pkl clipart_train.tsv
//
// Paths and labels are always paired from the same file and the same index.
// Labels follow FedBN's fixed class orders ([DomainNetClasses],
// [OfficeCaltech10Classes]).
//
// # Class names
//
// [Dataset.Classes] are prompt-ready: ordered by label, with '_' replaced by
// a space ("Apply_Eye_Makeup" becomes "Apply Eye Makeup").
package dataset
